"""agentmem toolbox: tools registered once, found by meaning, run safely."""

from .augment import Augmentation
from .errors import ToolboxError, ToolNotRegisteredError, ToolNotRunnableError, ToolSchemaError
from .index import GROUP_WEIGHT, KEYWORD_WEIGHT, NO_TOOL_SCORE, request_parts
from .models import Retrieved, Tool, ToolResult
from .schema import FunctionSpec, describe_function
from .schemas import describe_schema
from .text import split_identifier
from .toolbox import Toolbox

__all__ = [
    "Augmentation", "FunctionSpec", "GROUP_WEIGHT", "KEYWORD_WEIGHT", "NO_TOOL_SCORE", "Retrieved", "Tool",
    "ToolNotRegisteredError", "ToolNotRunnableError", "ToolResult", "ToolSchemaError", "Toolbox", "ToolboxError",
    "describe_function", "describe_schema", "request_parts", "split_identifier",
]

"""agentmem toolbox: tools registered once, found by meaning, run safely."""

from .augment import Augmentation
from .errors import ToolboxError, ToolNotRegisteredError, ToolSchemaError
from .models import Tool, ToolResult
from .ranking import DEFAULT_MIN_COVERAGE, DEFAULT_RRF_K, DEFAULT_WEIGHTS
from .schema import FunctionSpec, describe_function
from .text import split_identifier
from .toolbox import Toolbox

__all__ = [
    "Augmentation", "DEFAULT_MIN_COVERAGE", "DEFAULT_RRF_K", "DEFAULT_WEIGHTS", "FunctionSpec", "Tool",
    "ToolNotRegisteredError", "ToolResult", "ToolSchemaError", "Toolbox", "ToolboxError", "describe_function",
    "split_identifier",
]

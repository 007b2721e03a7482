"""Tool schemas from type hints and docstrings (no database needed)."""

from __future__ import annotations

import datetime as dt
import enum
import functools
from typing import Annotated, Any, Literal, Optional

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from toolbox import ToolSchemaError, describe_function, split_identifier
from toolbox.text import keyword_query, search_text


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: str
    postcode: str | None = None


class Parcel(BaseModel):
    weight_kg: float = Field(description="weight in kilograms")
    to: Address


def props(func: Any) -> dict[str, Any]:
    return describe_function(func).parameters["properties"]


@pytest.mark.parametrize("hint, expected", [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (list, {"type": "array"}),
    (list[str], {"type": "array", "items": {"type": "string"}}),
    (list[list[int]], {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}),
    (dict, {"type": "object"}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (Optional[str], {"type": ["string", "null"]}),
    (int | None, {"type": ["integer", "null"]}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
    (Unit, {"type": "string", "enum": ["celsius", "fahrenheit"]}),
    (Priority, {"type": "integer", "enum": [1, 2]}),
    (Optional[Unit], {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]}),
    (Any, {}),
    (Annotated[str, "the city"], {"type": "string", "description": "the city"}),
    (str | int, {"anyOf": [{"type": "string"}, {"type": "integer"}]}),
])
def test_each_supported_hint_maps_to_its_schema(hint: Any, expected: dict[str, Any]) -> None:
    def tool(x):  # type: ignore[no-untyped-def]
        """A tool."""
    tool.__annotations__ = {"x": hint}
    assert props(tool)["x"] == expected


def test_pydantic_model_is_inlined_with_defs_hoisted_and_validates() -> None:
    def ship(parcel: Parcel) -> str:
        """Ship a parcel."""
        return "ok"
    params = describe_function(ship).parameters
    schema = params["properties"]["parcel"]
    assert schema["type"] == "object" and set(schema["required"]) == {"weight_kg", "to"}
    assert schema["properties"]["weight_kg"]["description"] == "weight in kilograms"
    assert schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert "Address" in params["$defs"]
    validator = Draft202012Validator(params)
    assert validator.is_valid({"parcel": {"weight_kg": 2.5, "to": {"street": "1 Main St"}}})
    assert not validator.is_valid({"parcel": {"weight_kg": 2.5, "to": {"postcode": "X"}}})  # street missing


def test_other_types_pydantic_knows_are_delegated() -> None:
    def book(day: dt.date) -> None:
        """Book a day."""
    assert props(book)["day"] == {"format": "date", "type": "string"}


def test_defaults_required_and_closed_object() -> None:
    def tool(city: str, days: int = 3, unit: Unit = Unit.CELSIUS, tags: list[str] | None = None,
             limit: int = None) -> None:  # type: ignore[assignment]
        """Forecast."""
    params = describe_function(tool).parameters
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    p = params["properties"]
    assert p["days"]["default"] == 3
    assert p["unit"]["default"] == "celsius"  # the Enum member's value, as JSON
    assert p["tags"]["default"] is None
    assert p["limit"]["type"] == ["integer", "null"]  # ``int = None`` accepts null


def test_docstring_google_sphinx_and_numpy_parameters() -> None:
    def google(city: str, days: int) -> None:
        """Weather forecast for a city.

        Longer explanation
        on two lines.

        Args:
            city (str): City name,
                e.g. "Paris".
            days: How many days ahead.

        Returns:
            The forecast.
        """
    def sphinx(to: str) -> None:
        """Send an email.

        :param to: recipient address
        :type to: str
        :returns: message id
        """
    def numpy(x: int) -> None:
        """Square a number.

        Parameters
        ----------
        x : int
            The number.
        """
    g = describe_function(google)
    assert g.description == "Weather forecast for a city.\n\nLonger explanation\non two lines."
    assert g.parameters["properties"]["city"]["description"] == 'City name, e.g. "Paris".'
    assert g.parameters["properties"]["days"]["description"] == "How many days ahead."
    assert describe_function(sphinx).parameters["properties"]["to"]["description"] == "recipient address"
    assert describe_function(sphinx).description == "Send an email."
    assert describe_function(numpy).parameters["properties"]["x"]["description"] == "The number."

    def undocumented(x: int) -> None:
        pass
    assert describe_function(undocumented).description == "undocumented."


def test_bound_methods_closures_partials_and_name_override() -> None:
    class Service:
        def lookup(self, key: str) -> str:
            """Look a key up."""
            return key

    prefix = "p"

    def closure(value: int) -> str:
        """Closure tool."""
        return prefix + str(value)

    def base(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert list(props(Service().lookup)) == ["key"]
    assert list(props(closure)) == ["value"]
    part = functools.partial(base, b=2)
    assert describe_function(part, name="add_two").parameters["required"] == ["a"]
    assert describe_function(lambda q: q, name="echo").name == "echo"


def test_functions_that_cannot_be_tools_are_clear_errors() -> None:
    with pytest.raises(ToolSchemaError, match="name"):
        describe_function(lambda q: q)  # "<lambda>" is not a valid tool name
    with pytest.raises(ToolSchemaError, match="name"):
        describe_function(len, name="has space")

    def pos_only(a: int, /) -> None:
        """x"""
    with pytest.raises(ToolSchemaError, match="positional-only"):
        describe_function(pos_only)

    def bad_keys(m: dict[int, str]) -> None:
        """x"""
    with pytest.raises(ToolSchemaError, match="keys"):
        describe_function(bad_keys)

    def unknown(x: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        """x"""
    with pytest.raises(ToolSchemaError, match="resolve"):
        describe_function(unknown)
    with pytest.raises(ToolSchemaError):
        describe_function(42)  # type: ignore[arg-type]


def test_identifiers_are_split_into_words_for_both_indexes() -> None:
    assert split_identifier("getWeather") == ["get", "weather"]
    assert split_identifier("get_weather") == ["get", "weather"]
    assert split_identifier("HTTPGetJSON_v2") == ["http", "get", "json", "v2"]
    assert keyword_query("What's getWeather for Paris?") == "what | s | get | weather | for | paris"
    assert keyword_query("!!! ???") is None
    text = search_text("getWeather", "Current weather.", {"properties": {"cityName": {"description": "City"}}},
                       ["is it raining in Oslo"])
    assert text.splitlines() == ["get weather", "Current weather.", "Parameters: city name: City",
                                 "is it raining in Oslo"]


def test_parameter_names_that_are_pydantic_attributes_and_undescribable_hints() -> None:
    def tool(schema: str, json: int, model_config: bool = False) -> None:
        """Names a pydantic model could not have as fields."""
    params = describe_function(tool).parameters
    assert list(params["properties"]) == ["schema", "json", "model_config"]
    assert params["required"] == ["schema", "json"]

    def nested_keys(m: list[dict[int, str]]) -> None:
        """x"""
    with pytest.raises(ToolSchemaError, match="keys"):
        describe_function(nested_keys)

    class Opaque:
        pass

    def opaque(x: Opaque) -> None:
        """x"""
    opaque.__annotations__ = {"x": Opaque}
    with pytest.raises(ToolSchemaError, match="cannot be described"):
        describe_function(opaque)


def test_a_property_called_title_survives_the_tidying() -> None:
    class Book(BaseModel):
        title: str

    def add(book: Book) -> None:
        """Add a book."""
    add.__annotations__ = {"book": Book}
    schema = describe_function(add).parameters["properties"]["book"]
    assert schema["properties"] == {"title": {"type": "string"}} and "title" not in schema

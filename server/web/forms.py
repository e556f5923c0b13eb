"""Answer forms: a JSON schema becomes form fields, and posted form data becomes a JSON value.

A response model's JSON schema (as pydantic writes it) gives one input per property:
strings, numbers and whole numbers as typed inputs, optional booleans as checkboxes and
required ones as a Yes / No choice with neither preselected, enums and literals as selects, nested models (``$ref`` into ``$defs``) as groups of their own
fields, and anything else (lists, free-form objects, unions) as a JSON textarea. A text
whose proposed value spans lines (or whose schema says ``format: textarea``) is a textarea
too: a one-line input would drop its line breaks before the person saw it, and browsers
send a textarea's line breaks as CRLF, read back as the LF they stand for.
Reading a post back checks what a form can check — required fields, types, choices,
bounds, JSON syntax — and keeps what the person typed, so the page shows it again
next to the error; each error names the field by its label and says what it expects.
Validation against the model itself (custom validators) happens after, and its errors
land on the same fields, worded the same way (``form_errors``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.core.jsonvalues import JSON
from server.inputs import InputError, parse_json

#: form input names start with this, so no property can clash with ``_csrf_token``
PREFIX = "f."
#: nested models deeper than this (or recursive ones) are edited as JSON
MAX_DEPTH = 3
#: the option of a nullable select that means null
NULL_OPTION = ""
#: the choices of a required boolean
YES_NO = {"true": True, "false": False}
#: a string schema's ``format`` values that ask for a textarea
MULTILINE_FORMATS = frozenset({"textarea", "multiline", "multi-line"})
#: a string format in words, for a field's help (others are named as they are)
FORMATS: Mapping[str, str] = {"email": "an email address", "date": "a date, YYYY-MM-DD",
                              "date-time": "a date and time, YYYY-MM-DDTHH:MM:SS", "time": "a time, HH:MM:SS",
                              "uri": "a URL", "uuid": "a UUID", **{f: "" for f in MULTILINE_FORMATS}}

Loc = tuple[str | int, ...]


@dataclass(slots=True)
class FormField:
    """One input (or a group of them, for a nested model) and what it shows."""

    path: tuple[str, ...]
    label: str
    kind: str                       # text, integer, number, checkbox, select, radio, json, group
    required: bool = False
    nullable: bool = False
    help: str = ""
    options: list[tuple[str, str]] = field(default_factory=list)   # (form value, label)
    values: dict[str, JSON] = field(default_factory=dict)           # form value -> JSON value
    attrs: dict[str, str] = field(default_factory=dict)             # min, max, step, maxlength…
    json_type: str | None = None    # for a JSON field: "array" or "object" when the schema says so
    text: str = ""                  # what the input holds
    multiline: bool = False         # a text edited in a textarea
    checked: bool = False
    error: str | None = None
    detail: str | None = None       # the validator's own words behind ``error``, shown folded
    children: list[FormField] = field(default_factory=list)
    scope: str = ""                 # the question it answers, on a form that answers several

    @property
    def name(self) -> str:
        return (f"{self.scope}:" if self.scope else "") + PREFIX + ".".join(self.path)

    @property
    def id(self) -> str:
        return (f"{self.scope}-" if self.scope else "") + "f-" + "-".join(self.path)

    def walk(self) -> list[FormField]:
        return [self, *(f for c in self.children for f in c.walk())]


# ------------------------------------------------------------------ schema → fields

def _deref(node: Any, root: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (and a one-element ``allOf``) merged in; the node's own
    keys (default, description) win over the referenced definition's."""
    out: dict[str, Any] = dict(node) if isinstance(node, Mapping) else {}
    for _ in range(32):   # a chain of references, never a cycle
        ref = out.pop("$ref", None)
        if ref is None and isinstance(out.get("allOf"), list) and len(out["allOf"]) == 1:
            target: Any = out.pop("allOf")[0]
        elif isinstance(ref, str) and ref.startswith("#/"):
            target = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, Mapping) else {}
        else:
            return out
        out = {**(dict(target) if isinstance(target, Mapping) else {}), **out}
    return out


def _unwrap(node: Any, root: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema of a property without its ``| None``, and whether null is allowed."""
    s = _deref(node, root)
    types = s.get("type")
    if isinstance(types, list):
        rest = [t for t in types if t != "null"]
        s = {**s, "type": rest[0] if len(rest) == 1 else rest}
        return s, len(rest) < len(types)
    for key in ("anyOf", "oneOf"):
        branches = s.get(key)
        if not isinstance(branches, list):
            continue
        resolved = [_deref(b, root) for b in branches]
        real = [b for b in resolved if b.get("type") != "null"]
        nullable = len(real) < len(resolved)
        own = {k: v for k, v in s.items() if k != key}
        if len(real) == 1:
            return {**real[0], **own}, nullable
        return own, nullable   # a real union: edited as JSON
    return s, False


def _option(value: JSON) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _field(path: tuple[str, ...], node: Any, required: bool, root: Mapping[str, Any],
           given: tuple[bool, JSON], depth: int) -> FormField:
    s, nullable = _unwrap(node, root)
    # the property's own title, never a referenced model's (that names its class)
    own = node.get("title") if isinstance(node, Mapping) else None
    label = str(own or path[-1].replace("_", " ").title())
    f = FormField(path, label, "json", required=required, nullable=nullable, help=str(s.get("description") or ""))
    present, value = given
    if not present and "default" in s:
        present, value = True, s["default"]
    kind = s.get("type")
    if "enum" in s or "const" in s:
        choices: list[JSON] = list(s["enum"]) if isinstance(s.get("enum"), list) else [s.get("const")]
        f.kind = "select"
        f.options = [(_option(c), str(c)) for c in choices]
        f.values = {_option(c): c for c in choices}
        if nullable:
            f.options.insert(0, (NULL_OPTION, "(none)"))
        elif not present:
            f.options.insert(0, (NULL_OPTION, "— choose —"))
        f.text = NULL_OPTION if not present or value is None else _option(value)
    elif kind == "boolean" and required:
        # an unticked checkbox would read as "no": a required one is chosen, never assumed
        f.kind = "radio"
        f.options = [("true", "Yes"), ("false", "No")]
        f.values = dict(YES_NO)
        f.text = _option(value) if present and isinstance(value, bool) else ""
    elif kind == "boolean":
        f.kind, f.checked = "checkbox", present and value is True
    elif kind in ("integer", "number"):
        f.kind = kind
        f.attrs["step"] = "1" if kind == "integer" else "any"
        for key, attr in (("minimum", "min"), ("maximum", "max")):
            if isinstance(s.get(key), (int, float)):
                f.attrs[attr] = str(s[key])
        f.text = str(value) if present and isinstance(value, (int, float)) and not isinstance(value, bool) else ""
    elif kind == "string":
        f.kind = "text"
        for key, attr in (("minLength", "minlength"), ("maxLength", "maxlength")):
            if isinstance(s.get(key), int):
                f.attrs[attr] = str(s[key])
        # a schema's pattern is not always a valid HTML pattern: the model checks it. A raw
        # regular expression helps few people: said only when nothing else explains the field
        said = FORMATS.get(str(s["format"]), f"format: {s['format']}") if s.get("format") else \
            f"must match the pattern {s['pattern']}" if s.get("pattern") and not f.help else ""
        if said:
            f.help = (f.help + " " if f.help else "") + f"({said})"
        f.text = value if present and isinstance(value, str) else ""
        f.multiline = "\n" in f.text or "\r" in f.text or s.get("format") in MULTILINE_FORMATS
    elif kind == "object" and isinstance(s.get("properties"), Mapping) and depth < MAX_DEPTH and not nullable:
        f.kind = "group"
        f.children = _fields(s, root, value if present and isinstance(value, Mapping) else {}, path, depth + 1)
    else:
        f.json_type = kind if kind in ("array", "object") else None
        if f.json_type == "object" and isinstance(s.get("properties"), Mapping):
            names = ", ".join(s["properties"])
            f.help = (f.help + " " if f.help else "") + f"(a JSON object with: {names})"
        f.text = json.dumps(value, indent=2, ensure_ascii=False) if present else ""
    return f


def _fields(schema: Mapping[str, Any], root: Mapping[str, Any], values: Mapping[str, JSON],
            prefix: tuple[str, ...], depth: int) -> list[FormField]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return []
    required = set(schema.get("required") or ())
    return [_field((*prefix, str(name)), node, name in required, root,
                   (name in values, values.get(name)), depth)
            for name, node in props.items()]


def is_object_schema(schema: JSON) -> bool:
    """Whether the schema describes an object with named fields (a form can be built)."""
    return isinstance(schema, Mapping) and isinstance(_deref(schema, schema).get("properties"), Mapping)


def build(schema: Mapping[str, Any], values: Mapping[str, JSON] | None = None) -> list[FormField]:
    """The fields of an object schema, pre-filled with ``values`` (else the defaults)."""
    return _fields(_deref(schema, schema), schema, values or {}, (), 0)


def value_field(name: str, label: str, schema: Mapping[str, Any]) -> FormField | None:
    """One typed input for an answer that is a single value, not an object (a model like
    ``RootModel[float]``): a Yes / No choice, a number, a text or a choice; None when the schema
    gives no such type (the answer is then typed as JSON)."""
    f = _field((name,), schema, True, schema, (False, None), MAX_DEPTH)
    if f.kind == "json":
        return None
    f.label = label
    return f


def scoped(fields: Sequence[FormField], scope: str) -> list[FormField]:
    """The fields, named within ``scope`` (an interrupt's id) so that the inputs of
    several questions can share one form."""
    for top in fields:
        for f in top.walk():
            f.scope = scope
    return list(fields)


def proposed(payload: JSON, schema: Mapping[str, Any]) -> dict[str, JSON]:
    """Values a question proposes for its answer: payload keys that name fields of the
    answer (``{"args": {...}}`` pre-fills an ``args`` field), or — when the answer model
    is the arguments themselves — the proposed ``args`` spread over its fields."""
    if not isinstance(payload, Mapping):
        return {}
    props = _deref(schema, schema).get("properties")
    if not isinstance(props, Mapping):
        return {}
    out = {k: v for k, v in payload.items() if k in props}
    args = payload.get("args")
    if "args" not in props and isinstance(args, Mapping):
        out.update({k: v for k, v in args.items() if k in props})
    return out


def json_field(name: str, label: str, *, required: bool = True, help: str = "", value: JSON = None,
               present: bool = False) -> FormField:
    """A free JSON input (an answer with no declared model, an effect's result)."""
    text = json.dumps(value, indent=2, ensure_ascii=False) if present else ""
    return FormField((name,), label, "json", required=required, help=help, text=text)


def radio_field(name: str, label: str, choices: Sequence[tuple[str, str]], *, required: bool = True,
                help: str = "") -> FormField:
    """One of a few documented string answers, as radio buttons."""
    return FormField((name,), label, "radio", required=required, help=help, options=list(choices),
                     values={value: value for value, _ in choices})


# ------------------------------------------------------------------ form data → value

class _Missing:
    pass


MISSING = _Missing()


def _number(f: FormField, raw: str) -> JSON:
    text = raw.strip()
    if f.kind == "integer":
        try:
            n: float = int(text)
        except ValueError:
            raise ValueError("must be a whole number") from None
    else:
        try:
            n = float(text)
        except ValueError:
            raise ValueError("must be a number") from None
        if not math.isfinite(n):
            raise ValueError("must be a finite number")
    low, high = f.attrs.get("min"), f.attrs.get("max")
    if low is not None and n < float(low):
        raise ValueError(f"must be at least {low}")
    if high is not None and n > float(high):
        raise ValueError(f"must be at most {high}")
    return n


def _text(f: FormField, raw: str) -> JSON:
    low, high = f.attrs.get("minlength"), f.attrs.get("maxlength")
    if low is not None and len(raw) < int(low):
        raise ValueError(f"must be at least {low} characters")
    if high is not None and len(raw) > int(high):
        raise ValueError(f"must be at most {high} characters")
    return raw


def _json(f: FormField, raw: str) -> JSON:
    try:
        value: JSON = parse_json(raw, "", lines=True)
    except InputError as e:   # said of the field: "<label> is not valid JSON: …"
        raise ValueError(str(e).lstrip()) from None
    if value is None and f.nullable:
        return value
    if f.json_type == "array" and not isinstance(value, list):
        raise ValueError("must be a JSON list, like [1, 2]")
    if f.json_type == "object" and not isinstance(value, dict):
        raise ValueError('must be a JSON object, like {"key": "value"}')
    return value


def _read_one(f: FormField, form: Mapping[str, str]) -> JSON | _Missing:
    """The field's value from the form (``MISSING`` when left empty and optional);
    records what was typed and, on a mistake, the error."""
    if f.kind == "group":
        out: dict[str, JSON] = {}
        for child in f.children:
            v = _read_one(child, form)
            if not isinstance(v, _Missing):
                out[child.path[-1]] = v
        return out
    raw = form.get(f.name)
    if f.kind == "checkbox":
        f.checked = raw is not None and raw.strip().lower() not in ("", "off", "false", "0")
        return f.checked
    f.text = raw if raw is not None else ""
    if f.kind == "text" and "\r" in f.text:   # a textarea's line breaks, as browsers send them
        f.text = f.text.replace("\r\n", "\n").replace("\r", "\n")
        f.multiline = True
    empty = f.text.strip() == "" if f.kind != "text" else f.text == ""
    if empty:
        if f.required and f.nullable:
            return None
        if f.required:
            # worded as the model's errors are (``wording``): the field's label, then what it expects
            f.error = f"{f.label} is required" + (": choose Yes or No" if f.values == YES_NO else "")
        return MISSING
    try:
        if f.kind in ("select", "radio"):
            if f.text not in f.values:
                raise ValueError("must be one of: " + ", ".join(label for v, label in f.options if v != NULL_OPTION))
            return f.values[f.text]
        if f.kind in ("integer", "number"):
            return _number(f, f.text)
        if f.kind == "text":
            return _text(f, f.text)
        return _json(f, f.text)
    except ValueError as e:
        f.error = f"{f.label} {e}"
        return MISSING


def read(fields: Sequence[FormField], form: Mapping[str, str]) -> tuple[dict[str, JSON], bool]:
    """The JSON object the form describes, and whether every field was well filled in
    (a field in error carries its message and keeps its typed text)."""
    out: dict[str, JSON] = {}
    for f in fields:
        v = _read_one(f, form)
        if not isinstance(v, _Missing):
            out[f.path[-1]] = v
    return out, not any(x.error for f in fields for x in f.walk())

"""A cell's model requests to the host: ``llm_query`` asks pi-repl's host, which asks a model.

The request goes over the Jupyter stdin channel (an ``input_request`` whose prompt is marked as
pi-repl's), the channel the protocol gives a running cell to ask its front end something; the
host answers with the model's text (``src/llm/kernel_requests.rs`` documents the wire format and
why this channel). No key, URL or client is in the kernel: who answers is the host's choice
(the MCP client through sampling, the pi extension with pi's model, or an endpoint configured
for the host).

Owns: sending one batch and reading its answers, the exceptions a failed request raises, and
checking an answer against a JSON schema. The user-facing functions are the default helper
``toolbox/llm.py`` (a helper file, not a module of this package: hence this module's own name).

While one request waits, others from other threads of the cell wait for it (the stdin socket
is the kernel's one channel); ``llm_query_batched`` sends many prompts in one request and the
host answers them ``concurrency`` at a time. An interrupt (``KeyboardInterrupt``) ends the wait
at once; the host cancels the request, and a reply that arrives later is discarded by ipykernel
before the next request.
"""

import json
import re

from . import host_requests

MARKER = "llm/1"
"""Marks a stdin request as pi-repl's (the host answers anything else with an empty string)."""


class LLMError(Exception):
    """A model request from a cell failed."""


class LLMUnavailable(LLMError):
    """Nobody can answer model requests in this workspace; the message says what to configure."""


class LLMBudgetExceeded(LLMError):
    """A per-cell or per-session limit on model requests or tokens was reached."""


class LLMPromptTooLarge(LLMError):
    """The prompt is larger than the limit; split it."""


class LLMTimeout(LLMError):
    """The model did not answer in time."""


class LLMCancelled(LLMError):
    """The request was cancelled (the cell was interrupted)."""


class LLMSchemaError(LLMError):
    """The answer is not JSON that follows the requested schema; ``.text`` holds the answer."""

    def __init__(self, message, text):
        super().__init__(message)
        self.text = text


_KINDS = {
    cls.__name__: cls
    for cls in (LLMError, LLMUnavailable, LLMBudgetExceeded, LLMPromptTooLarge, LLMTimeout,
                LLMCancelled)
}

def ask(prompts, concurrency=1):
    """Send ``prompts`` (a list of request dicts) to the host; return one answer dict each."""
    value = host_requests.send(MARKER, {"prompts": prompts, "concurrency": concurrency})
    if value is None:
        raise LLMUnavailable("llm_query runs only inside a pi-repl kernel")
    try:
        answers = json.loads(value)["answers"]
    except (ValueError, KeyError, TypeError):
        raise LLMError(
            "pi-repl's host did not answer the model request (this kernel is not driven by "
            "pi-repl, or its host is older than this module)"
        ) from None
    if len(answers) != len(prompts):
        raise LLMError(f"the host answered {len(answers)} of {len(prompts)} prompts")
    return answers


def error_of(answer):
    """The exception for a failed answer."""
    kind = _KINDS.get(answer.get("error"), LLMError)
    return kind(answer.get("message") or "the model request failed")


def request_of(prompt, system=None, max_tokens=None, model=None, schema=None):
    """One prompt as the host reads it."""
    if not isinstance(prompt, str):
        raise TypeError(f"the prompt must be a str, not {type(prompt).__name__}")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError("max_tokens must be a positive int")
    if schema is not None and not isinstance(schema, dict):
        raise TypeError("schema must be a JSON schema as a dict")
    request = {"prompt": prompt}
    for key, value in (("system", system), ("max_tokens", max_tokens), ("model", model),
                       ("schema", schema)):
        if value is not None:
            request[key] = value
    return request


def parse_answer(text, schema):
    """``text`` as a JSON value that follows ``schema`` (code fences around it are allowed)."""
    body = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    try:
        value = json.loads(body)
    except ValueError as error:
        raise LLMSchemaError(f"the answer is not JSON ({error})", text) from None
    problem = _validate(value, schema)
    if problem:
        raise LLMSchemaError(f"the answer does not follow the schema: {problem}", text)
    return value


def _validate(value, schema):
    """The first way ``value`` breaks ``schema``, or None (``jsonschema`` when installed)."""
    try:
        import jsonschema
    except ImportError:
        return _basic_validate(value, schema, "$")
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        where = "$" + "".join(f"[{p!r}]" for p in error.absolute_path)
        return f"{where}: {error.message}"
    except jsonschema.SchemaError as error:
        raise LLMError(f"the schema itself is invalid: {error.message}") from None
    return None


_TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
    "integer": int, "number": (int, float),
}


def _basic_validate(value, schema, where):
    """A subset of JSON schema: type, enum, required, properties, additionalProperties, items."""
    expected = schema.get("type")
    if expected is not None:
        kinds = expected if isinstance(expected, list) else [expected]
        ok = any(
            isinstance(value, _TYPES.get(kind, object))
            and not (kind in ("integer", "number") and isinstance(value, bool))
            for kind in kinds
        )
        if not ok:
            return f"{where}: expected {expected}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {schema['enum']}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                return f"{where}: {name!r} is required"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                problem = _basic_validate(item, properties[name], f"{where}[{name!r}]")
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return f"{where}: unexpected property {name!r}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problem = _basic_validate(item, schema["items"], f"{where}[{index}]")
            if problem:
                return problem
    return None


"""pi-repl default helper: ``llm_query`` and ``llm_query_batched``.

A helper file like any user's (see docs/helpers.md); the channel to the host is
``pi_repl_kernel.model_requests``, where the exceptions live
(``from pi_repl_kernel.model_requests import LLMError``).
"""

from pi_repl_kernel import model_requests as _requests

helper_description = "Ask a model from a cell (answered by the agent's own model; no key here)."

__all__ = ["llm_query", "llm_query_batched"]


def llm_query(prompt, *, system=None, max_tokens=None, model=None, schema=None):
    """Ask a model one question and return its answer.

    The host answers (the agent's own model through the MCP client, pi's model in pi, or an
    endpoint configured for pi-repl); no key is in the workspace. See docs/llm.md.

    Args:
        prompt: the question, a str (the data it is about goes in it).
        system: an optional system prompt.
        max_tokens: the longest answer, in tokens (4096 when not given).
        model: a model to prefer (a hint; who answers decides).
        schema: a JSON schema (a dict): the answer is then parsed as JSON and checked against
            it, and the parsed value is returned.

    Returns:
        The answer's text, or with ``schema`` the parsed JSON value.

    Raises:
        LLMUnavailable: nobody can answer; the message says what to configure.
        LLMBudgetExceeded: a per-cell or per-session limit was reached.
        LLMPromptTooLarge: the prompt is over the size limit; split it.
        LLMTimeout: no answer in time. LLMCancelled: the cell was interrupted.
        LLMSchemaError: the answer is not JSON following ``schema`` (``.text`` holds it).
        LLMError: any other failure (the base class of all of these, in pi_repl_kernel.model_requests).
    """
    request = _requests.request_of(prompt, system, max_tokens, model, schema)
    (answer,) = _requests.ask([request])
    if not answer.get("ok"):
        raise _requests.error_of(answer)
    text = answer.get("text") or ""
    return _requests.parse_answer(text, schema) if schema is not None else text


def llm_query_batched(prompts, *, system=None, max_tokens=None, model=None, schema=None,
                      concurrency=4):
    """Ask a model many questions at once; return the answers in order.

    All prompts go to the host in one request and are answered ``concurrency`` at a time.
    One failure does not lose the others: its place holds the exception instead of the answer.

    Args:
        prompts: the questions, an iterable of str.
        system, max_tokens, model, schema: as for ``llm_query``, the same for every prompt.
        concurrency: how many are asked at the same time (1 to 16).

    Returns:
        A list as long as ``prompts``: each item is the answer (as ``llm_query`` returns it)
        or the ``LLMError`` that prompt got.

    Raises:
        ValueError: ``concurrency`` is not a positive int. TypeError: a prompt is not a str.
        LLMError: the request as a whole could not be made (not inside a pi-repl kernel).
    """
    prompts = list(prompts)
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError("concurrency must be a positive int")
    requests = [_requests.request_of(p, system, max_tokens, model, schema) for p in prompts]
    if not requests:
        return []
    results = []
    for answer in _requests.ask(requests, concurrency=concurrency):
        if not answer.get("ok"):
            results.append(_requests.error_of(answer))
            continue
        text = answer.get("text") or ""
        try:
            results.append(_requests.parse_answer(text, schema) if schema is not None else text)
        except _requests.LLMSchemaError as error:
            results.append(error)
    return results

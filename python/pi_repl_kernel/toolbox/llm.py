"""pi-repl default helper: ``llm_query`` and ``llm_query_batched``.

A helper file like any user's (see docs/helpers.md); the channel to the host is
``pi_repl_kernel.llm``, where the exceptions live (``from pi_repl_kernel.llm import LLMError``).
"""

from pi_repl_kernel import llm as _llm

helper_description = "Ask a model from a cell (answered by the agent's own model; no key here)."

__all__ = ["llm_query", "llm_query_batched"]


def llm_query(prompt, *, system=None, max_tokens=None, model=None, schema=None):
    """Ask a model; return its text, or with ``schema`` (a JSON schema dict) the parsed JSON value.

    Raises ``LLMError`` (or a subclass: ``LLMUnavailable`` says what to configure,
    ``LLMBudgetExceeded``, ``LLMPromptTooLarge``, ``LLMTimeout``, ``LLMSchemaError``).
    """
    request = _llm.request_of(prompt, system, max_tokens, model, schema)
    (answer,) = _llm.ask([request])
    if not answer.get("ok"):
        raise _llm.error_of(answer)
    text = answer.get("text") or ""
    return _llm.parse_answer(text, schema) if schema is not None else text


def llm_query_batched(prompts, *, system=None, max_tokens=None, model=None, schema=None,
                      concurrency=4):
    """Ask a model about each prompt, ``concurrency`` at a time; answers in order.

    Each item is the answer (as ``llm_query`` returns it) or the ``LLMError`` that prompt got:
    one failure does not lose the others.
    """
    prompts = list(prompts)
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError("concurrency must be a positive int")
    requests = [_llm.request_of(p, system, max_tokens, model, schema) for p in prompts]
    if not requests:
        return []
    results = []
    for answer in _llm.ask(requests, concurrency=concurrency):
        if not answer.get("ok"):
            results.append(_llm.error_of(answer))
            continue
        text = answer.get("text") or ""
        try:
            results.append(_llm.parse_answer(text, schema) if schema is not None else text)
        except _llm.LLMSchemaError as error:
            results.append(error)
    return results

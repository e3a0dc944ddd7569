"""Request parsing and response bodies for SGLang's native and OpenAI-compatible APIs (pure).

Shapes follow SGLang 0.5.23: native `/generate` returns {text, output_ids, meta_info}; streaming sends the
cumulative text in each `data:` event; OpenAI endpoints return `chat.completion` / `text_completion` objects
and `*.chunk` deltas, with usage. Errors use SGLang's bodies: native {"error": {"message"}}, OpenAI
{"object": "error", "message", "type", "param", "code"}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .tokens import EOS_TOKEN_ID, Prompt, chat_prompt, output_text, prompt_from_ids, prompt_from_text

WEIGHT_VERSION = "default"


class BadRequest(Exception):
    """A client error; `message` is what SGLang would put in the error body."""


@dataclass(frozen=True)
class GenInput:
    prompt: Prompt
    max_new_tokens: int
    explicit_max: bool  # True: ends with finish_reason "length"; False: the simulated EOS ("stop")
    prefill_only: bool = False  # a PD prefill server's answer: one token, finish_reason length 0


def _max_tokens(value: Any, default: int) -> tuple[int, bool]:
    if value is None:
        return default, False
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"max_new_tokens must be a non-negative integer, got {value!r}")
    return value, True


def check_context(inp: GenInput, context_len: int) -> None:
    if inp.prompt.num_tokens >= context_len:
        raise BadRequest(
            f"The input ({inp.prompt.num_tokens} tokens) is longer than the model's context length "
            f"({context_len} tokens)."
        )


def _is_id_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)


def parse_generate(body: dict[str, Any], default_tokens: int) -> tuple[list[GenInput], bool]:
    """Native /generate: `text` or `input_ids`, single or batch. Returns (inputs, is_batch)."""
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None:
        if isinstance(text, str):
            prompts, batch = [prompt_from_text(text)], False
        elif isinstance(text, list) and all(isinstance(t, str) for t in text):
            prompts, batch = [prompt_from_text(t) for t in text], True
        else:
            raise BadRequest("text must be a string or a list of strings")
    elif ids is not None:
        if _is_id_list(ids):
            prompts, batch = [prompt_from_ids(ids)], False
        elif isinstance(ids, list) and all(_is_id_list(x) for x in ids):
            prompts, batch = [prompt_from_ids(x) for x in ids], True
        else:
            raise BadRequest("input_ids must be a list of integers or a list of such lists")
    else:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    sp = body.get("sampling_params") or {}
    sps = sp if isinstance(sp, list) else [sp] * len(prompts)
    if len(sps) != len(prompts) or not all(isinstance(s, dict) for s in sps):
        raise BadRequest("sampling_params must be an object or one object per input")
    out = []
    for p, s in zip(prompts, sps, strict=True):
        n, explicit = _max_tokens(s.get("max_new_tokens"), default_tokens)
        out.append(GenInput(p, n, explicit))
    return out, batch


def parse_completion(body: dict[str, Any]) -> list[GenInput]:
    """/v1/completions: prompt as str, [str], [int] or [[int]]; max_tokens defaults to 16 as in SGLang."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [prompt_from_text(prompt)]
    elif _is_id_list(prompt) and prompt:
        prompts = [prompt_from_ids(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [prompt_from_text(p) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(_is_id_list(p) for p in prompt):
        prompts = [prompt_from_ids(p) for p in prompt]
    else:
        raise BadRequest("prompt must be a string, a list of strings or a list of token ids")
    n, explicit = _max_tokens(body.get("max_tokens", 16), 16)
    return [GenInput(p, n, explicit) for p in prompts]


def parse_chat(body: dict[str, Any], default_tokens: int) -> GenInput:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    raw = body.get("max_completion_tokens", body.get("max_tokens"))
    n, explicit = _max_tokens(raw, default_tokens)
    return GenInput(prompt_from_text(chat_prompt(messages)), n, explicit)


def pinned_rank(body: dict[str, Any], num_ranks: int) -> int | None:
    """`data_parallel_rank` (smg --dp-aware) or `routed_dp_rank` pins a request to one DP rank."""
    for key in ("data_parallel_rank", "routed_dp_rank"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < num_ranks:
            raise BadRequest(f"{key}={value!r} is out of range [0, {num_ranks})")
        return value
    return None


def abort_reason(message: str, status: int) -> dict[str, Any]:
    """FINISH_ABORT.to_json(): a request the scheduler aborted."""
    return {"type": "abort", "message": message, "status_code": status, "err_type": None}


def finish_reason(inp: GenInput) -> dict[str, Any]:
    if inp.prefill_only:  # FINISH_LENGTH(length=0), set when the KV transfer is done
        return {"type": "length", "length": 0}
    if inp.explicit_max:
        return {"type": "length", "length": inp.max_new_tokens}
    return {"type": "stop", "matched": EOS_TOKEN_ID}


def native_body(
    rid: str,
    inp: GenInput,
    ids: Sequence[int],
    cached: int,
    done: bool,
    e2e: float,
) -> dict[str, Any]:
    return {
        "text": output_text(ids),
        "output_ids": list(ids),
        "meta_info": {
            "id": rid,
            "finish_reason": finish_reason(inp) if done else None,
            "prompt_tokens": inp.prompt.num_tokens,
            "weight_version": WEIGHT_VERSION,
            "total_retractions": 0,
            "completion_tokens": len(ids),
            "cached_tokens": cached,
            "e2e_latency": e2e,
        },
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def _oa_finish(inp: GenInput) -> tuple[str, int | None]:
    return ("length", None) if inp.explicit_max else ("stop", EOS_TOKEN_ID)


def completion_body(
    rid: str, model: str, created: int, results: Sequence[tuple[GenInput, Sequence[int]]]
) -> dict[str, Any]:
    choices = []
    for i, (inp, ids) in enumerate(results):
        reason, matched = _oa_finish(inp)
        choices.append(
            {
                "index": i,
                "text": output_text(ids),
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        )
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(sum(i.prompt.num_tokens for i, _ in results), sum(len(ids) for _, ids in results)),
        "metadata": {"weight_version": WEIGHT_VERSION},
    }


def completion_chunk(rid: str, model: str, created: int, text: str, inp: GenInput | None) -> dict[str, Any]:
    """A streamed text delta; pass `inp` on the last chunk to set finish_reason."""
    reason, matched = _oa_finish(inp) if inp is not None else (None, None)
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}],
    }


def chat_body(rid: str, model: str, created: int, inp: GenInput, ids: Sequence[int]) -> dict[str, Any]:
    reason, matched = _oa_finish(inp)
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": output_text(ids),
                    "reasoning_content": None,
                    "tool_calls": None,
                },
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        ],
        "usage": usage(inp.prompt.num_tokens, len(ids)),
        "metadata": {"weight_version": WEIGHT_VERSION},
    }


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any], inp: GenInput | None) -> dict[str, Any]:
    reason, matched = _oa_finish(inp) if inp is not None else (None, None)
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}],
    }


def usage_chunk(rid: str, model: str, created: int, obj: str, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt, completion),
    }


def openai_error(message: str, status: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def model_card(served: str, created: int, context_len: int) -> dict[str, Any]:
    return {
        "id": served,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": served,
        "parent": None,
        "max_model_len": context_len,
    }


def model_not_found(model: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"The model '{model}' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


_ARCH = (
    ("deepseek", "deepseek_v3", "DeepseekV3ForCausalLM"),
    ("qwen", "qwen3", "Qwen3ForCausalLM"),
    ("mixtral", "mixtral", "MixtralForCausalLM"),
    ("mistral", "mistral", "MistralForCausalLM"),
    ("gemma", "gemma3", "Gemma3ForCausalLM"),
    ("gpt-oss", "gpt_oss", "GptOssForCausalLM"),
)


def model_info(model_path: str, tokenizer_path: str, served: str, disaggregation_mode: str) -> dict[str, Any]:
    """`/model_info`; the architecture is guessed from the model path (no config is downloaded)."""
    low = model_path.lower()
    model_type, arch = next(((t, a) for key, t, a in _ARCH if key in low), ("llama", "LlamaForCausalLM"))
    return {
        "model_path": model_path,
        "tokenizer_path": tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": WEIGHT_VERSION,
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": model_type,
        "architectures": [arch],
        "served_model_name": served,
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": disaggregation_mode,
    }

"""Render request pieces into `(role, text)` chunks as a serving engine would see them.

A prompt is: the system prompt, the tool definitions, then one chunk per message, in that
order (Anthropic Messages and OpenAI Chat Completions alike). `encoder` wraps each chunk in
chat-template markers (`<|im_start|>role\\n ... <|im_end|>\\n`), so a shared prefix of
messages gives a shared prefix of tokens.

Inside a message, content blocks become text the way open-model chat templates (Qwen's, for
one) write them: text as is, tool calls as `<tool_call>{"name":..,"arguments":..}</tool_call>`,
tool results as `<tool_response>...</tool_response>`, thinking as `<think>...</think>`, images
and documents as a short placeholder carrying a hash of their data (so two different images
differ, without tokenizing base64). Blocks of other types are written as compact JSON.

Per-request noise is removed first, because it would break the shared prefix without
changing what the model reads (research/traces.md section 6):
- `cache_control` markers (they move to the newest message every turn);
- thinking `signature` fields (opaque, encrypted);
- Claude Code's billing header line in the system prompt, `x-anthropic-billing-header:
  cc_version=...; cc_entrypoint=...; cch=<per-request nonce>;` (the API lifts it from the
  system prompt; it is not model input).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import orjson
import xxhash

BILLING_HEADER = re.compile(r"(?m)^[ \t]*x-anthropic-billing-header:[^\n]*(?:\n|$)")
_NOISE_KEYS = ("cache_control",)


def strip_noise(value: Any) -> Any:
    """A copy of `value` without `cache_control` keys or thinking `signature` fields."""
    if isinstance(value, dict):
        drop_signature = value.get("type") in ("thinking", "redacted_thinking")
        return {
            k: strip_noise(v)
            for k, v in value.items()
            if k not in _NOISE_KEYS and not (drop_signature and k == "signature")
        }
    if isinstance(value, list):
        return [strip_noise(v) for v in value]
    return value


def _json(value: Any) -> str:
    return orjson.dumps(strip_noise(value), option=orjson.OPT_NON_STR_KEYS).decode()


def system_text(system: Any) -> str:
    """An Anthropic `system` (a string or a list of text blocks), billing header removed."""
    if system is None:
        return ""
    text = system if isinstance(system, str) else content_text(system)
    return BILLING_HEADER.sub("", text).strip("\n")


def tools_text(tools: Any) -> str:
    """Tool definitions, one compact JSON object per line (Anthropic or OpenAI shape)."""
    if not tools:
        return ""
    if not isinstance(tools, list):
        return _json(tools)
    return "# Tools\n<tools>\n" + "\n".join(_json(t) for t in tools) + "\n</tools>"


def _media(block: dict[str, Any]) -> str:
    source = block.get("source") or block.get("image_url") or block.get("input_audio") or {}
    if isinstance(source, dict):
        data = source.get("data") or source.get("url") or source.get("file_id") or ""
        media = source.get("media_type") or ""
    else:
        data, media = source, ""
    digest = xxhash.xxh3_64_hexdigest(str(data).encode("utf-8", "surrogatepass"))
    return f"[{block.get('type')} {media} {digest}]".replace("  ", " ")


def block_text(block: Any) -> str:
    """One content block (Anthropic) or content part (OpenAI) as engine-side text."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return _json(block)
    kind = block.get("type")
    if kind == "text" or (kind is None and "text" in block):
        text = block.get("text")
        return text if isinstance(text, str) else _json(text)
    if kind == "thinking":
        thinking = block.get("thinking") or ""
        return f"<think>\n{thinking}\n</think>" if thinking else ""
    if kind == "redacted_thinking":
        return ""  # opaque to anyone but the provider; nothing to tokenize
    if kind in ("tool_use", "server_tool_use"):
        call = {"name": block.get("name"), "arguments": block.get("input")}
        return f"<tool_call>\n{_json(call)}\n</tool_call>"
    if kind == "tool_result":
        return f"<tool_response>\n{content_text(block.get('content'))}\n</tool_response>"
    if kind in ("image", "document", "image_url", "input_audio", "file"):
        return _media(block)
    return _json(block)


def content_text(content: Any) -> str:
    """Message content: a string, or a list of blocks/parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (block_text(b) for b in content)
        return "\n".join(p for p in parts if p)
    return block_text(content)


def message_chunk(message: dict[str, Any]) -> tuple[str, str]:
    """(role, text) of one Anthropic or OpenAI chat message."""
    role = message.get("role")
    role = role if isinstance(role, str) else "user"
    text = content_text(message.get("content"))
    calls = message.get("tool_calls")  # OpenAI assistant tool calls
    if isinstance(calls, list) and calls:
        rendered = []
        for call in calls:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(args, str):
                # arguments arrive as a JSON string; render them like Anthropic input
                with contextlib.suppress(orjson.JSONDecodeError):
                    args = orjson.loads(args)
            call = {"name": fn.get("name") if isinstance(fn, dict) else None, "arguments": args}
            rendered.append(f"<tool_call>\n{_json(call)}\n</tool_call>")
        text = "\n".join(p for p in [text, *rendered] if p)
    if role == "tool":
        text = f"<tool_response>\n{text}\n</tool_response>"
    return role, text

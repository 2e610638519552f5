"""Token counts for imported text: a documented offline estimate, or a real tokenizer if installed.

`estimate` (the default, no dependency) counts the pieces a BPE pre-tokenizer cuts text into: a
word with its leading space is one token plus one per 12 letters beyond the first, a group of up
to 3 digits is one token (Llama-3 and cl100k split numbers so), a run of one punctuation mark is
one token per 8 marks, and a whitespace run other than a single space is one token. Measured
against the Llama-3 tokenizer on the shared AG2 logs (docs/workloads.md shows the command), it is
close in total and per message; ~4 characters per token, the usual rule of thumb, is worse on
code and tables.

Real tokenizers, used only when asked for and only if they load without a download:
`tiktoken:NAME` (needs its BPE file in tiktoken's cache), `quicktok:NAME` (the quicktok-v1
package bundles cl100k_base, o200k_base, llama3 and qwen3), `hf:PATH` (a local tokenizer.json
for the `tokenizers` package).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentrt.errors import AgentrtError

_PIECE = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?([^\s\w])\1*|_+|\s+")
WORD_LETTERS = 12
PUNCT_RUN = 8

Counter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    n = 0
    for m in _PIECE.finditer(text):
        s = m.group().lstrip(" ") or " "
        c = s[0]
        if c.isalpha():
            n += 1 + (len(s) - 1) // WORD_LETTERS
        elif c.isdigit() or c.isspace():
            n += 1
        else:
            n += 1 + (len(s) - 1) // PUNCT_RUN
    return n


def get_counter(spec: str = "estimate") -> Counter:
    """A token counter by name: `estimate`, `tiktoken:NAME`, `quicktok:NAME` or `hf:PATH`."""
    kind, _, arg = spec.partition(":")
    if kind == "estimate" and not arg:
        return estimate_tokens
    if kind not in ("tiktoken", "quicktok", "hf") or not arg:
        raise AgentrtError(f"unknown tokenizer '{spec}'; use estimate, tiktoken:NAME, quicktok:NAME or hf:PATH")
    try:
        if kind == "hf":
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(arg)
            return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
        mod = __import__(kind)
        enc = mod.get_encoding(arg)
    except ImportError:
        raise AgentrtError(f"tokenizer '{spec}' needs the '{kind}' package, which is not installed") from None
    except Exception as e:  # a missing file or a failed download, whatever the library raises
        raise AgentrtError(f"tokenizer '{spec}' could not be loaded offline: {type(e).__name__}: {e}") from None
    if kind == "tiktoken":
        return lambda text: len(enc.encode_ordinary(text))
    return lambda text: len(enc.encode(text))

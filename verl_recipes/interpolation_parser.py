"""OmegaConf's interpolation parser, memoized, for the processes that compose recipes.

OmegaConf parses a string with `${` in it with its ANTLR grammar each time it creates or resolves the node that holds
it, and keeps no parse tree: `make check` parsed about 29,000 strings, most of them the same few hundred (verl's
`${oc.select:...}` defaults, our `${tokens:N}` budgets), and that was an eighth of its time. A parse tree is a pure
function of its string, rule and lexer mode, and OmegaConf's visitor only reads it; a string that fails to parse is
not remembered, so it raises the same GrammarParseError every time (tests/test_interpolation_parser.py).
"""

from __future__ import annotations

import functools

from omegaconf import _utils, base, grammar_parser

omegaconf_parse = grammar_parser.parse  # OmegaConf's own, kept before install() replaces it


@functools.lru_cache(maxsize=8192)
def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE"):
    return omegaconf_parse(value, parser_rule, lexer_mode)


def install() -> None:
    """OmegaConf parses through the memo from now on: base and _utils imported `parse` by name."""
    for module in (grammar_parser, base, _utils):
        module.parse = parse

"""Shell completion for ``cloudybot``, written from the argument parser itself (so it never
lists a command that is not there): ``eval "$(cloudybot completion bash)"``."""

from __future__ import annotations

import argparse
import shlex


def _tree(parser: argparse.ArgumentParser, path: str,
          into: dict[str, tuple[list[str], list[str]]]) -> None:
    """Each command path's (subcommands, options), e.g. ``"users"``: (add, list, ...)."""
    words: list[str] = []
    options: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                _tree(child, f"{path} {name}".strip(), into)
        else:
            options += [flag for flag in action.option_strings if flag.startswith("--")]
    into[path] = (words, options)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion function for ``parser``'s commands and options."""
    tree: dict[str, tuple[list[str], list[str]]] = {}
    _tree(parser, "", tree)
    cases = []
    for path, (words, options) in sorted(tree.items()):
        candidates = shlex.quote(" ".join([*words, *options]))
        cases.append(f"        {shlex.quote(path or '-')}) words={candidates} ;;")
    return "\n".join([
        "_cloudybot() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" path="" word words',
        '    for word in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do',
        '        case "$word" in -*) ;; *) if [[ -n "${_cloudybot_paths[${path:+$path }$word]}" ]];'
        ' then path="${path:+$path }$word"; fi ;; esac',
        "    done",
        '    case "${path:--}" in',
        *cases,
        "        *) words= ;;",
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "declare -gA _cloudybot_paths=(" + " ".join(
            f"[{shlex.quote(path)}]=1" for path in sorted(tree) if path) + ")",
        "complete -F _cloudybot cloudybot",
        "",
    ])

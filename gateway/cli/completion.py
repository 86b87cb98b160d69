"""Shell completion for ``cloudybot`` in bash, zsh and fish, written from the argument parser
itself (so it never lists a command that is not there): ``eval "$(cloudybot completion bash)"``,
``eval "$(cloudybot completion zsh)"`` (after ``compinit``), ``cloudybot completion fish |
source``.

Each shell's script holds the same table, every command path (``users add``) with the words
that may follow it (subcommands, options), and the same walk: the words typed so far, options
skipped, name the deepest known path."""

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
        elif action.option_strings:
            options += [flag for flag in action.option_strings if flag.startswith("--")]
        elif action.choices:  # a positional with a fixed set of values: `completion SHELL`
            words += [str(choice) for choice in action.choices]
    into[path] = (words, options)


def _table(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each command path (``-`` for none) and the words that may follow it, space-separated."""
    tree: dict[str, tuple[list[str], list[str]]] = {}
    _tree(parser, "", tree)
    return {path or "-": " ".join([*words, *options])
            for path, (words, options) in sorted(tree.items())}


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


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """A zsh completion function (``compdef``, so after ``compinit``) for ``parser``."""
    table = _table(parser)
    return "\n".join([
        "typeset -gA _cloudybot_tree",
        "_cloudybot_tree=(",
        *(f"    {shlex.quote(path)} {shlex.quote(words)}" for path, words in table.items()),
        ")",
        "_cloudybot() {",
        '    local p="" w',
        '    for w in "${(@)words[2,CURRENT-1]}"; do',
        '        [[ $w == -* ]] && continue',
        '        (( ${+_cloudybot_tree[${p:+$p }$w]} )) && p="${p:+$p }$w"',
        "    done",
        '    local -a candidates',
        '    candidates=(${=_cloudybot_tree[${p:--}]})',
        '    compadd -- "${candidates[@]}"',
        "}",
        "compdef _cloudybot cloudybot",
        "",
    ])


def fish_script(parser: argparse.ArgumentParser) -> str:
    """A fish completion for ``parser``: ``cloudybot completion fish | source``."""
    table = _table(parser)
    return "\n".join([
        "set -g __cloudybot_paths " + " ".join(shlex.quote(path) for path in table),
        "set -g __cloudybot_words " + " ".join(shlex.quote(words) for words in table.values()),
        "function __cloudybot_complete",
        "    set -l typed (commandline -opc)",
        "    set -e typed[1]",
        "    set -l p -",
        "    for w in $typed",
        "        string match -q -- '-*' $w; and continue",
        "        set -l next $w",
        '        test "$p" != -; and set next "$p $w"',
        "        contains -- $next $__cloudybot_paths; and set p $next",
        "    end",
        "    set -l i (contains -i -- $p $__cloudybot_paths)",
        "    string split -n ' ' -- $__cloudybot_words[$i]",
        "end",
        "complete -c cloudybot -f -a '(__cloudybot_complete)'",
        "",
    ])


SCRIPTS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}

"""`draquota completion bash|zsh`: a completion script for the shell.

    source <(draquota completion bash)

Completes subcommands, their options, the values of `-o` and file names.
"""

from __future__ import annotations

import argparse

__all__ = ["configure", "run", "script"]

_BASH = """# draquota bash completion (draquota completion bash)
_draquota() {
    local cur prev words cword
    _init_completion 2>/dev/null || {
        cur="${COMP_WORDS[COMP_CWORD]}"; prev="${COMP_WORDS[COMP_CWORD-1]}"
        words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    }
    local commands="%(commands)s"
    local command=""
    for w in "${words[@]:1:cword-1}"; do
        case " $commands " in *" $w "*) command="$w"; break;; esac
    done
    case "$prev" in
        -o|--output) COMPREPLY=($(compgen -W "json yaml wide name" -- "$cur")); return;;
        --state|--cert-dir|--dir|--out|--manifests) COMPREPLY=($(compgen -d -- "$cur")); return;;
    esac
    if [[ -z "$command" ]]; then
        COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur")); return
    fi
    local options=""
    case "$command" in
%(cases)s
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _draquota draquota
"""


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of `parser`. argparse keeps them only in the private `_actions` (it has
    no public list), and the script must describe the parser the CLI really builds."""
    return list(parser._actions)


def _subcommands(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of `root`: the one argument whose choices map names to parsers."""
    for action in _arguments(root):
        if isinstance(action.choices, dict):
            return {
                name: sub
                for name, sub in action.choices.items()
                if isinstance(sub, argparse.ArgumentParser)
            }
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    found = [s for a in _arguments(parser) for s in a.option_strings]
    for name in _subcommands(parser):
        found.append(name)
    return sorted(set(found))


def script(shell: str) -> str:
    """The completion script for `shell` (zsh loads the bash one through bashcompinit)."""
    from webhook.cli import parser

    commands = _subcommands(parser())
    cases = "\n".join(
        f'        {name}) options="{" ".join(_options(sub))}";;' for name, sub in commands.items()
    )
    text = _BASH % {"commands": " ".join(commands), "cases": cases}
    if shell == "zsh":
        text = "autoload -U +X bashcompinit && bashcompinit\n" + text
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh"))


def run(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return 0

"""`scalebot completion bash|zsh|fish`: shell completion generated from the command line's own parser.

Generated rather than written by hand, so a new command or flag completes without anyone
remembering to add it. Each command path ("", "plan", "plan drain", …) completes to its
subcommands, its flags and the choices of its positionals; a flag with fixed choices (`-o`,
`--provider`) completes to them. zsh loads the same function through `bashcompinit`; fish gets
the same three tables as fish functions.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

SHELLS = ("bash", "zsh", "fish")
DYNAMIC = ("operations show", "operations cancel", "ops show", "ops cancel")
"""The commands whose ID completes from the database (`ops list -o name`, a read of a few tenths of
a second, honouring a `--db` already typed)."""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _paths(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for name, sub in _subparsers(parser).items():
        yield from _paths(sub, f"{path} {name}".strip())


def _words(parser: argparse.ArgumentParser) -> list[str]:
    words = list(_subparsers(parser))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:  # a global flag accepted where it does not apply
            continue
        if action.option_strings:
            words += [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        elif action.choices:
            words += [str(c) for c in action.choices]
    return sorted(set(words))


def _flag_choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {
        flag: [str(c) for c in action.choices]
        for action in parser._actions
        if action.option_strings and action.choices and not isinstance(action, argparse._SubParsersAction)
        for flag in action.option_strings
    }


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (bash, zsh or fish), for `source <(scalebot completion bash)`
    (fish: `scalebot completion fish | source`)."""
    if shell == "fish":
        return _fish(parser)
    prog = parser.prog
    func = "_" + prog.replace("-", "_")
    cases, subs, flags = [], [], []
    for path, sub in _paths(parser):
        quoted = shlex.quote(path)
        cases.append(f"    {quoted}) echo {shlex.quote(' '.join(_words(sub)))} ;;")
        subs.append(f"    {quoted}) echo {shlex.quote(' '.join(_subparsers(sub)))} ;;")
        for flag, choices in _flag_choices(sub).items():
            flags.append(f"    {shlex.quote(path + ' ' + flag)}) echo {shlex.quote(' '.join(choices))} ;;")
    body = f"""# {prog} {shell} completion, generated from its parser: source <({prog} completion {shell})
{func}_words() {{
  case "$1" in
{chr(10).join(cases)}
  esac
}}
{func}_subcommands() {{
  case "$1" in
{chr(10).join(subs)}
  esac
}}
{func}_flag_values() {{
  case "$1" in
{chr(10).join(flags)}
    *) return 1 ;;
  esac
}}
{func}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" word i values db=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${{COMP_WORDS[i]}}"
    [[ "$word" == --db ]] && db=(--db "${{COMP_WORDS[i+1]}}")
    case " $({func}_subcommands "$path") " in
      *" $word "*) path="${{path:+$path }}$word" ;;
    esac
  done
  if values="$({func}_flag_values "$path $prev")"; then
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return 0
  fi
  values=""
  case "$path" in
    {"|".join(shlex.quote(p) for p in DYNAMIC)})
      [[ "$cur" == -* ]] ||
        values="$({prog} ops list -o name "${{db[@]}}" 2>/dev/null | sed 's,^operation/,,') " ;;
  esac
  for word in $({func}_words "$path"); do  # flags only once a dash is typed, as kubectl does
    [[ "$cur" != -* && "$word" == -* ]] || values+="$word "
  done
  COMPREPLY=($(compgen -W "$values" -- "$cur"))
}}
complete -F {func} {prog}
"""
    if shell == "zsh":
        return f"#compdef {prog}\nautoload -U +X bashcompinit && bashcompinit\n{body}"
    return body


def _fish(parser: argparse.ArgumentParser) -> str:
    prog = parser.prog
    func = "__" + prog.replace("-", "_")
    cases, subs, flags = [], [], []
    for path, sub in _paths(parser):
        quoted = shlex.quote(path) if path else "''"
        cases.append(f"        case {quoted}\n            echo {shlex.quote(' '.join(_words(sub)))}")
        subs.append(f"        case {quoted}\n            echo {shlex.quote(' '.join(_subparsers(sub)))}")
        for flag, choices in _flag_choices(sub).items():
            key = shlex.quote(path + " " + flag)
            flags.append(f"        case {key}\n            echo {shlex.quote(' '.join(choices))}")
    nl = "\n"
    return f"""# {prog} fish completion, generated from its parser: {prog} completion fish | source
function {func}_words
    switch $argv[1]
{nl.join(cases)}
    end
end
function {func}_subcommands
    switch $argv[1]
{nl.join(subs)}
    end
end
function {func}_flag_values
    switch $argv[1]
{nl.join(flags)}
        case '*'
            return 1
    end
end
function {func}_complete
    set -l tokens (commandline -opc)
    set -l cur (commandline -ct)
    set -l path ''
    for word in $tokens[2..-1]
        if contains -- $word (string split ' ' -- ({func}_subcommands "$path"))
            set path (string trim -- "$path $word")
        end
    end
    if set -l values ({func}_flag_values "$path $tokens[-1]")
        string split ' ' -- $values
        return
    end
    for word in (string split ' ' -- ({func}_words "$path"))
        # flags only once a dash is typed, as kubectl does
        if string match -q -- '-*' $cur; or not string match -q -- '-*' $word
            echo $word
        end
    end
end
complete -c {prog} -f -a '({func}_complete)'
"""

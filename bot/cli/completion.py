"""`scalebot completion bash|zsh|fish`: shell completion generated from the command line's own parser.

Generated rather than written by hand, so a new command or flag completes without anyone
remembering to add it. Each command path ("", "plan", "plan drain", …) completes to its
subcommands, its flags and the choices of its positionals; a flag with fixed choices (`-o`,
`--provider`) completes to them. zsh loads the same function through `bashcompinit`; fish gets
the same three tables as fish functions.

Names complete dynamically, as kubectl's do: a command's positionals (nodes, pools, operation IDs,
clusters; `CommandSpec.completes` in `bot.text.command_registry`) are asked of the hidden
`scalebot __complete KIND`, which reads the database read-only or the cluster with a short timeout,
with the `--db`, `--kubeconfig`, `--context` and `--simulated` already typed; it prints nothing
rather than fail, and its stderr is discarded, so a completion never breaks the shell.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

from bot.text import command_registry

SHELLS = ("bash", "zsh", "fish")
CONTEXT_FLAGS = ("--db", "--kubeconfig", "--context")
"""Flags typed on the line that `__complete` is given too (with `--simulated`)."""


def dynamic(paths: Iterator[str]) -> dict[str, str]:
    """Command path -> what its positionals complete to, for every path of the tree (aliases too)."""
    found = {}
    for path in paths:
        words = path.split()
        if words and words[0] == "ops":  # the alias of `operations`
            words[0] = "operations"
        spec = command_registry.CLI.get(" ".join(words))
        if spec is not None and spec.completes:
            found[path] = spec.completes
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _hidden(name: str) -> bool:
    spec = command_registry.CLI.get(name)
    return spec is not None and spec.hidden


def _paths(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for name, sub in _subparsers(parser).items():
        yield from _paths(sub, f"{path} {name}".strip())


def _words(parser: argparse.ArgumentParser) -> list[str]:
    words = [w for w in _subparsers(parser) if not _hidden(w)]
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
    kinds = [
        f"    {shlex.quote(path)}) echo {kind} ;;"
        for path, kind in dynamic(p for p, _ in _paths(parser)).items()
    ]
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
{func}_dynamic() {{
  case "$1" in
{chr(10).join(kinds)}
    *) return 1 ;;
  esac
}}
{func}_flag_values() {{
  case "$1" in
{chr(10).join(flags)}
    *) return 1 ;;
  esac
}}
{func}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  local path="" word i values kind ctx=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${{COMP_WORDS[i]}}"
    case "$word" in
      {"|".join(CONTEXT_FLAGS)}) ctx+=("$word" "${{COMP_WORDS[i+1]}}") ;;
      --simulated) ctx+=(--simulated) ;;
    esac
    case " $({func}_subcommands "$path") " in
      *" $word "*) path="${{path:+$path }}$word" ;;
    esac
  done
  if values="$({func}_flag_values "$path $prev")"; then
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return 0
  fi
  values=""
  # Names from scalebot's state (never failing: no output, stderr dropped), as kubectl's __complete.
  if [[ "$cur" != -* ]] && kind="$({func}_dynamic "$path")"; then
    values="$({prog} __complete "$kind" --prefix "$cur" "${{ctx[@]}}" 2>/dev/null) "
  fi
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
    kinds = [
        f"        case {shlex.quote(path)}\n            echo {kind}"
        for path, kind in dynamic(p for p, _ in _paths(parser)).items()
    ]
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
function {func}_dynamic
    switch $argv[1]
{nl.join(kinds)}
        case '*'
            return 1
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
    set -l ctx
    for i in (seq 2 (count $tokens))
        set -l word $tokens[$i]
        if contains -- $word {" ".join(CONTEXT_FLAGS)}; and test $i -lt (count $tokens)
            set ctx $ctx $word $tokens[(math $i + 1)]
        else if test "$word" = --simulated
            set ctx $ctx --simulated
        end
        if contains -- $word (string split ' ' -- ({func}_subcommands "$path"))
            set path (string trim -- "$path $word")
        end
    end
    if set -l values ({func}_flag_values "$path $tokens[-1]")
        string split ' ' -- $values
        return
    end
    # Names from scalebot's state (never failing: no output, stderr dropped), as kubectl's __complete.
    if not string match -q -- '-*' $cur; and set -l kind ({func}_dynamic "$path")
        {prog} __complete $kind --prefix "$cur" $ctx 2>/dev/null
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

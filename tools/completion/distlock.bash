# bash completion for distlock(1): subcommands, their options, and backend URL
# schemes after --backend. It asks the tool itself (distlock --help,
# distlock SUBCOMMAND --help, distlock schemes) at each completion, so that it
# cannot drift from it.

_distlock_help_words() {
    # The option names of "distlock [SUB] --help" (-x and --long, each name of
    # "-w,--wait"), or with "subcommands" the subcommands it lists.
    local bin=$1 what=$2 sub=$3
    if [[ $what == subcommands ]]; then
        "$bin" --help 2>/dev/null | awk '/^Subcommands:/ {on=1; next} on && /^  [a-z]/ {print $1}'
    else
        "$bin" ${sub:+"$sub"} --help 2>/dev/null |
            awk '/^(Options|Positionals):/ {on=1; next} /^[^ ]/ {on=0}
                 on && /^  -/ {n=split($1, names, ","); for (i = 1; i <= n; i++) print names[i]}'
    fi
}

_distlock() {
    local cur prev bin=${COMP_WORDS[0]} sub="" i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_CWORD:+${COMP_WORDS[COMP_CWORD-1]}}
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == -- ]] && return 0  # run's command: the shell's own completion is not ours to give
        if [[ ${COMP_WORDS[i]} != -* ]]; then
            sub=${COMP_WORDS[i]}
            break
        fi
    done
    if [[ $prev == --backend ]]; then
        local schemes s
        schemes=$("$bin" schemes 2>/dev/null)
        COMPREPLY=()
        for s in $schemes; do
            [[ $s:// == "$cur"* ]] && COMPREPLY+=("$s://")
        done
        compopt -o nospace 2>/dev/null
        return 0
    fi
    if [[ $prev == --backend-file ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return 0
    fi
    if [[ -z $sub ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$(_distlock_help_words "$bin" options)" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(_distlock_help_words "$bin" subcommands)" -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_distlock_help_words "$bin" options "$sub")" -- "$cur"))
    fi
    return 0
}

complete -F _distlock distlock

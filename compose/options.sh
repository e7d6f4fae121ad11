# Option parsing shared by the compose/ scripts (sourced, not run).
#
#   parse_options SCRIPT HELP_LINES "--opt=VAR ..." POSITIONAL_VAR -- "$@"
#
# Sets VAR from `--opt VALUE` for each declared option, POSITIONAL_VAR from the
# one positional argument (empty name: none is allowed); `-h`/`--help` prints the
# script's header lines HELP_LINES (e.g. 2,12) and exits 0; anything else is
# refused with exit 2, naming the script and the argument.
parse_options() {
    local script=$1 lines=$2 spec=$3 positional=$4 name word var
    shift 5
    name=$(basename "$script")
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) sed -n "${lines}p" "$script"; exit 0 ;;
            -*)
                var=
                for word in $spec; do [ "${word%%=*}" = "$1" ] && var=${word#*=}; done
                [ -n "$var" ] || { echo "$name: unknown option $1" >&2; exit 2; }
                [ $# -ge 2 ] || { echo "$name: $1 needs a value" >&2; exit 2; }
                printf -v "$var" '%s' "$2"; shift 2 ;;
            *)
                [ -n "$positional" ] || { echo "$name: unknown argument $1" >&2; exit 2; }
                printf -v "$positional" '%s' "$1"; shift ;;
        esac
    done
}

# >>> git xet guard v1 (__XET_HOOK__): git xet hooks uninstall removes this block >>>
# Refuses this Git write while the worktree's task guard (<git dir>/xet-guard) names a runner that
# is gone: git xet task recover clears it. POSIX sh, builtins only; no guard costs two tests.
# Installed by src/hooks/install.ts from hooks/guard.sh; docs in hooks/README.md.
__xet_alive() {
  __xet_k=
  { read -r __xet_k </proc/sys/kernel/random/boot_id; } 2>/dev/null || [ -n "$__xet_k" ] || return 1
  [ "$__xet_k" = "$3" ] || return 1
  __xet_k=
  { read -r __xet_k <"/proc/$1/stat"; } 2>/dev/null || [ -n "$__xet_k" ] || return 1
  # Field 2 (the command name) may hold spaces and ')': field 3 starts after the last ") ".
  case $__xet_k in *") "*) ;; *) return 1 ;; esac
  __xet_k=${__xet_k##*") "}
  case $__xet_k in Z* | X*) return 1 ;; esac
  __xet_i=3
  while [ "$__xet_i" -lt 22 ]; do
    case $__xet_k in *" "*) __xet_k=${__xet_k#* } ;; *) return 1 ;; esac
    __xet_i=$((__xet_i + 1))
  done
  [ "${__xet_k%% *}" = "$2" ]
}
__xet_guard() {
  if [ "__XET_HOOK__" = reference-transaction ] && [ "${1:-}" != prepared ]; then return 0; fi
  __xet_d=${GIT_DIR:-.git}
  if [ -f "$__xet_d" ]; then
    # A .git file (linked worktree, submodule): "gitdir: X", X relative to the file's directory.
    __xet_l=
    { read -r __xet_l <"$__xet_d"; } 2>/dev/null || [ -n "$__xet_l" ] || return 0
    case $__xet_l in "gitdir: "*) __xet_l=${__xet_l#gitdir: } ;; *) return 0 ;; esac
    case $__xet_l in
      /*) __xet_d=$__xet_l ;;
      *) case $__xet_d in */*) __xet_d=${__xet_d%/*}/$__xet_l ;; *) __xet_d=$__xet_l ;; esac ;;
    esac
  fi
  [ -e "$__xet_d/xet-guard" ] || [ -L "$__xet_d/xet-guard" ] || return 0
  __xet_m= __xet_v= __xet_t= __xet_p= __xet_s= __xet_b= __xet_x=
  { read -r __xet_m __xet_v __xet_t __xet_p __xet_s __xet_b __xet_x <"$__xet_d/xet-guard"; } 2>/dev/null
  __xet_ok=
  if [ "$__xet_m" = xet-guard ] && [ "$__xet_v" = 1 ] && [ -z "$__xet_x" ] && [ ${#__xet_t} = 16 ] &&
    [ ${#__xet_b} = 36 ]; then
    case $__xet_t$__xet_p$__xet_s in *[!0-9a-f]*) ;; *)
      case $__xet_p$__xet_s in
        *[!0-9]*) ;;
        *) case $__xet_b in *[!0-9a-f-]*) ;; *) [ -n "$__xet_p" ] && [ -n "$__xet_s" ] && __xet_ok=1 ;; esac ;;
      esac
      ;;
    esac
  fi
  if [ -n "$__xet_ok" ] && __xet_alive "$__xet_p" "$__xet_s" "$__xet_b"; then return 0; fi
  if [ "__XET_HOOK__" = reference-transaction ]; then
    # git xet's own refs (snapshots recovery captures as evidence) still move; anything else is refused.
    __xet_in= __xet_r= __xet_n=
    while IFS= read -r __xet_r || [ -n "$__xet_r" ]; do
      case ${__xet_r#* * } in refs/xet/*) ;; *) __xet_n=1 ;; esac
      if [ -z "$__xet_in" ]; then __xet_in=$__xet_r; else __xet_in=$__xet_in"
$__xet_r"; fi
      __xet_r=
    done
    if [ -z "$__xet_n" ]; then
      if [ -n "$__xet_in" ]; then return 2; fi
      return 0
    fi
  fi
  if [ -n "$__xet_ok" ]; then
    printf '%s\n' "git xet: WORKDIR_RECOVERY_REQUIRED: task $__xet_t's runner died while it could write this worktree; run git xet task recover" >&2
  else
    printf '%s\n' "git xet: WORKDIR_RECOVERY_REQUIRED: this worktree's task guard is unreadable (a runner may have died while it could write this worktree); run git xet task recover" >&2
  fi
  return 1
}
if [ "${__XET_GUARD_PASSED:-}" = "$$" ]; then
  unset __XET_GUARD_PASSED
else
  __xet_rc=0
  __xet_guard "$@" || __xet_rc=$?
  if [ "$__xet_rc" = 2 ]; then
    # stdin was read to check the refs; run this hook again (same $0, same pid) with it.
    __XET_GUARD_PASSED=$$
    export __XET_GUARD_PASSED
    exec "$0" "$@" <<__XET_GUARD_EOF__
$__xet_in
__XET_GUARD_EOF__
  fi
  [ "$__xet_rc" = 0 ] || exit 1
fi
unset -f __xet_alive __xet_guard
unset __xet_k __xet_i __xet_d __xet_l __xet_m __xet_v __xet_t __xet_p __xet_s __xet_b __xet_x __xet_ok __xet_in __xet_r __xet_n __xet_rc
# <<< git xet guard v1 <<<

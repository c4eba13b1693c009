#!/usr/bin/env bash
# Schedules .ci/nightly (the sanitizer builds and a bounded fuzzing run, too long for .ci/run) on
# this machine with cron, once a day, and keeps what each night left:
#   runs/nightly/<UTC date>.log   the night's output (the last NIGHTLY_KEEP logs are kept, default 14)
#   runs/nightly/last             one line: "<UTC start> <UTC end> exit <code> <log>"
# The build folders (build-asan/, build-tsan/, build-fuzz*/) and the fuzzing corpus stay between
# nights, so a night after a small change rebuilds little and the corpus grows. A night still
# running when the next one is due makes the next one skip (flock), never overlap.
#
# Usage: tools/nightly-cron.sh install [HH:MM]   the crontab entry of this checkout (default 02:00, the
#                                                machine's local time); replaces an earlier one
#        tools/nightly-cron.sh remove            removes it (other crontab lines are kept)
#        tools/nightly-cron.sh status            the entry and the last night's line
#        tools/nightly-cron.sh run               what cron runs: .ci/nightly with the log and status above
# Environment: NIGHTLY_STEPS (the steps of .ci/nightly, default all three), NIGHTLY_KEEP, and those of
# .ci/nightly (JOBS, NIGHTLY_FUZZ_SECONDS), passed on through the crontab entry when set at install.
# For the tests: NIGHTLY_CRONTAB (the crontab command), NIGHTLY_COMMAND (instead of .ci/nightly),
# NIGHTLY_OUT (instead of runs/nightly), NIGHTLY_NO_SETUP=1 (no tools/setup.sh --cron).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crontab_cmd=${NIGHTLY_CRONTAB:-crontab}
tag="# onnx-pipetrain nightly: $repo"
die() { echo "nightly-cron: $*" >&2; exit 2; }

current() { "$crontab_cmd" -l 2>/dev/null | grep -vF -- "$tag" || true; }

case ${1:-} in
  install)
    when=${2:-02:00}
    [[ $when =~ ^([01][0-9]|2[0-3]):([0-5][0-9])$ ]] || die "install $when: expected HH:MM (00:00 to 23:59)"
    hour=$((10#${BASH_REMATCH[1]})) minute=$((10#${BASH_REMATCH[2]}))
    if [ "${NIGHTLY_NO_SETUP:-0}" != 1 ]; then
      "$repo/tools/setup.sh" --cron
      # Containers start no service by themselves; on systemd machines cron is already enabled.
      pgrep -x cron >/dev/null 2>&1 || { command -v service >/dev/null && service cron start >/dev/null 2>&1; } || true
    fi
    env_part=""
    for v in NIGHTLY_STEPS NIGHTLY_KEEP NIGHTLY_OUT JOBS NIGHTLY_FUZZ_SECONDS; do
      [ -n "${!v:-}" ] && env_part+="$v=$(printf %q "${!v}") "
    done
    line="$minute $hour * * * ${env_part}$(printf %q "$repo/tools/nightly-cron.sh") run $tag"
    others=$(current)  # read whole before the table is rewritten
    { [ -n "$others" ] && echo "$others"; echo "$line"; } | "$crontab_cmd" -
    echo "nightly-cron: .ci/nightly of $repo runs daily at $(printf %02d:%02d "$hour" "$minute") (cron, local time);" \
         "logs in ${NIGHTLY_OUT:-$repo/runs/nightly}/"
    ;;
  remove)
    others=$(current)
    { [ -n "$others" ] && echo "$others"; true; } | "$crontab_cmd" -
    echo "nightly-cron: removed the entry of $repo"
    ;;
  status)
    entry=$("$crontab_cmd" -l 2>/dev/null | grep -F -- "$tag" || true)
    if [ -n "$entry" ]; then echo "scheduled: $entry"; else echo "scheduled: no (tools/nightly-cron.sh install)"; fi
    out=${NIGHTLY_OUT:-$repo/runs/nightly}
    if [ -f "$out/last" ]; then echo "last night: $(cat "$out/last")"
    else echo "last night: none yet"; fi
    ;;
  run)
    out=${NIGHTLY_OUT:-$repo/runs/nightly}
    mkdir -p "$out"
    exec 9>"$out/.lock"
    if ! flock -n 9; then
      echo "nightly-cron: the previous night is still running; skipped $(date -u +%FT%TZ)" >>"$out/skipped.log"
      exit 0
    fi
    start=$(date -u +%FT%TZ)
    log="$out/$(date -u +%F).log"
    cd "$repo"
    # cron's PATH is minimal: the tools the steps call live in the usual places.
    export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
    if [ -n "${NIGHTLY_COMMAND:-}" ]; then cmd=(bash -c "$NIGHTLY_COMMAND"); else cmd=(.ci/nightly); fi
    set +e
    # shellcheck disable=SC2086  # NIGHTLY_STEPS is a list of steps
    "${cmd[@]}" ${NIGHTLY_STEPS:-} >"$log.tmp" 2>&1
    rc=$?
    set -e
    mv "$log.tmp" "$log"
    echo "$start $(date -u +%FT%TZ) exit $rc $log" >"$out/last.tmp" && mv "$out/last.tmp" "$out/last"
    # Keep the newest NIGHTLY_KEEP logs.
    keep=${NIGHTLY_KEEP:-14}
    ls -1 "$out"/????-??-??.log 2>/dev/null | sort | head -n -"$keep" | xargs -r rm -f
    exit $rc
    ;;
  *)
    die "usage: tools/nightly-cron.sh install [HH:MM] | remove | status | run"
    ;;
esac

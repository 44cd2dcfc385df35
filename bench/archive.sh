#!/usr/bin/env bash
# Keep logs, profiler dumps or probe outputs in main's history, out of its tree (docs/architecture.md, "Results
# and artefacts"): commit PATH... (under bench/results/{logs,profiles,probes}/, git-ignored), then remove them
# from the tree in a second commit. Prints the first commit's id: docs cite the files as SHA:PATH.
#     bash bench/archive.sh bench/results/logs/device-20261205a
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bash bench/archive.sh PATH..." >&2; exit 2; }
for path in "$@"; do
  case "$path" in
    bench/results/logs/*|bench/results/profiles/*|bench/results/probes/*) [ -e "$path" ] || { echo "no such path: $path" >&2; exit 2; } ;;
    *) echo "only bench/results/{logs,profiles,probes}/ are archived this way, not $path" >&2; exit 2 ;;
  esac
done
git diff --cached --quiet || { echo "the index holds staged changes: commit them first" >&2; exit 2; }
git add -f -- "$@"
git commit -q -m "artefacts kept in history: $*"
sha=$(git rev-parse --short=7 HEAD)
git rm -r -q --cached -- "$@"
git commit -q -m "artefacts of $sha out of the tree (git show $sha:PATH)"
echo "$sha"

#!/usr/bin/env bash
# interrupt-check.sh runs the promises about time on a deliberately slowed
# machine (minutes: a check, not part of the test suite): the README's main
# job under GOMAXPROCS=1 beside one CPU hog per core, interrupted with
# SIGINT at 5 seeded moments later than 15 s after its start, must exit 0
# each time with a verified program in its folder (the test
# TestReadmeJobInterruptedUnderLoad in cmd/lumsearch, which prints when each
# run exited).
#
#   scripts/interrupt-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LUMSEARCH_LOAD_TESTS=1 exec go test ./cmd/lumsearch -run '^TestReadmeJobInterruptedUnderLoad$' -v -count=1 -timeout 30m

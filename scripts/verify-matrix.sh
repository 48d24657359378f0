#!/usr/bin/env bash
# verify-matrix.sh compiles and verifies every corpus model x kind x dtype at
# real shapes and prints a Markdown table of the outcomes (a benchmark, not
# a test: the whole matrix takes about an hour on a 2-core machine).
#
#   scripts/verify-matrix.sh [--seq N] [--target NAME] [--models "a b"] [--kinds "k1 k2"] [--dtypes "f32 bf16"]
#
# Each cell runs `lumsearch compile MODEL:KIND --dtype DT --seq N --target T`
# with verification on (every distinct kernel under the CPU emulation at its
# real shapes, plus the reduced configuration), in a fresh output folder
# under a temporary directory that is removed at the end. The table says
# "verified" or the first line of the failure, with launches per run, the
# worst kernel error as a fraction of its allowance, and the wall time.
# Logs of failed cells are kept under $LOGDIR (default: a temporary folder
# that is printed).
set -euo pipefail

seq=512
target=h100
models="llama-3-8b llama-3.2-1b qwen2.5-0.5b mistral-7b gpt2"
kinds="layer model decode"
dtypes="f32 bf16 f16"
while [[ $# -gt 0 ]]; do
	case "$1" in
	--seq) seq=$2; shift 2 ;;
	--target) target=$2; shift 2 ;;
	--models) models=$2; shift 2 ;;
	--kinds) kinds=$2; shift 2 ;;
	--dtypes) dtypes=$2; shift 2 ;;
	*) echo "verify-matrix: unknown argument $1" >&2; exit 2 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logdir=${LOGDIR:-$(mktemp -d)}
bin=$work/lumsearch
(cd "$root" && go build -o "$bin" ./cmd/lumsearch)

echo "verify-matrix: seq $seq, target $target, $(date -u +%Y-%m-%dT%H:%MZ), $(cd "$root" && git rev-parse --short HEAD); logs of failures in $logdir" >&2
echo "| model | kind | dtype | result | launches | worst error / allowance | seconds |"
echo "|---|---|---|---|---|---|---|"
fails=0
for m in $models; do
	for k in $kinds; do
		kind=$k
		# GPT-2's layer is a "block".
		if [[ $m == gpt2 && $k == layer ]]; then kind=block; fi
		for dt in $dtypes; do
			name=$m:$kind
			log=$work/$m-$kind-$dt.log
			start=$(date +%s)
			if "$bin" compile "$name" --dtype "$dt" --seq "$seq" --target "$target" -o "$work/out-$m-$kind-$dt" >"$log" 2>&1; then
				result=verified
			else
				result=$(grep -m1 -E 'lumsearch: ' "$log" | sed -e 's/^lumsearch: //' -e 's/|/\\|/g' | cut -c1-160)
				result="FAIL: ${result:-exit $?}"
				cp "$log" "$logdir/"
				fails=$((fails + 1))
			fi
			secs=$(($(date +%s) - start))
			launches=$(sed -n -E 's/.*lowered: ([0-9]+) launches per run.*/\1/p' "$log" | head -1)
			worst=$(sed -n -E 's/.*worst error ([0-9.e+-]+) of the tolerance.*/\1/p' "$log" | head -1)
			echo "| $m | $kind | $dt | $result | ${launches:--} | ${worst:--} | $secs |"
			rm -rf "$work/out-$m-$kind-$dt"
		done
	done
done
echo "verify-matrix: $fails failed cells" >&2
[[ $fails -eq 0 ]]

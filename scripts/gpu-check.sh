#!/usr/bin/env bash
# gpu-check.sh: one command that measures lumsearch against PyTorch on a
# machine with an NVIDIA GPU and no Go toolchain.
#
# The lumsearch binary is built elsewhere (go build -o lumsearch
# ./cmd/lumsearch) and copied in with this folder (gpu-check.sh and
# torch_bench.py). The script:
#   1. detects the GPU with nvidia-smi; without one it says so and runs in
#      dry mode: every step that needs no GPU still runs, so the script is
#      tested on any machine;
#   2. checks the lumsearch binary runs (lumsearch version);
#   3. probes the PyTorch side (python3 + torch, both optional);
#   4. with a GPU and PyTorch, measures the ceilings: device-to-device copy
#      GB/s and a bf16 library matmul TFLOP/s;
#   5. for each graph in GRAPHS: compiles it with lumsearch into
#      OUT/compile-NAME (verified under the CPU emulation on a GPU machine,
#      so numbers are checked before anything is timed), times it with
#      "lumsearch bench" when the build has it (which with --save writes the
#      inputs and weights it fed and the compiled program's outputs into
#      OUT/bench-NAME/), and times the same graph in PyTorch eager and with
#      torch.compile on those same tensors, after comparing PyTorch's
#      outputs with lumsearch's (each graph capped in time); where the
#      tensors are missing or do not map onto PyTorch's graph, PyTorch runs
#      on its own random inputs and the table says so;
#   6. compiles one decode program whose position is a runtime extent
#      (DECODE, default llama-3.2-1b:decode, --max-seq DECODE_MAX_SEQ,
#      default 8192), runs each of its distinct kernels on the GPU and
#      under the CPU emulation on the same inputs and compares both with
#      the reference and with each other (bench --compare-kernels, capped
#      at COMPARE_SECONDS, default 150), then times it with bench --dim
#      past=P at three positions (DECODE_POSITIONS, default 128 1024 and
#      the last);
#   7. compiles one full-size layer at a prefill's length (PREFILL, default
#      llama-3-8b:layer, PREFILL_SEQ tokens, default 512), compares its
#      kernels on the GPU with the emulation as in step 6 and benches it;
#      for it and each decode position the summary lists every kernel's
#      measured time beside the cost model's, what the model says bounds
#      it, and the bandwidth it achieved (the figures to calibrate from),
#      and the comparison's table (each kernel's worst error on the GPU
#      and under the emulation, and their largest difference, in units of
#      the verifier's allowance) with its verdict;
#   8. serves the tiny Llama 2-vocabulary model of serve/testdata on the GPU
#      (lumsearch serve --device gpu) and drives it with lumsearch loadgen;
#   9. prints one table and writes OUT/results.json, OUT/summary.txt and
#      the tuning records produced (OUT/tunedb.jsonl).
# The whole run is capped by --budget-seconds (default 480: 8 minutes).
set -euo pipefail

usage() {
	cat <<'USAGE'
usage: gpu-check.sh [--dry-run] [--lumsearch PATH] [--out DIR] [--budget-seconds N]

  --dry-run           do only what needs no GPU, even if one is present
  --lumsearch PATH    the lumsearch binary (default: lumsearch beside this
                      script, else on PATH)
  --out DIR           where results go (default: ./gpu-check-out)
  --budget-seconds N  cap on the whole run in seconds (default 480)

Environment: GRAPHS (space-separated corpus graphs), SEQ (tokens, default
16), DTYPE (bf16, f16 or f32; default bf16), PYTHON (default python3),
COMPARE_SECONDS (cap on each kernel comparison, default 150).
USAGE
}

die_usage() {
	echo "gpu-check.sh: $*" >&2
	usage >&2
	exit 2
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dry_run=0
lumsearch=""
out="gpu-check-out"
budget=480

while [[ $# -gt 0 ]]; do
	case "$1" in
	--dry-run) dry_run=1 ;;
	--lumsearch)
		[[ $# -ge 2 ]] || die_usage "--lumsearch needs a PATH"
		lumsearch=$2
		shift
		;;
	--out)
		[[ $# -ge 2 ]] || die_usage "--out needs a DIR"
		out=$2
		shift
		;;
	--budget-seconds)
		[[ $# -ge 2 ]] || die_usage "--budget-seconds needs a number"
		budget=$2
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*) die_usage "unknown option: $1" ;;
	esac
	shift
done
[[ $budget =~ ^[0-9]+$ && $budget -gt 0 ]] || die_usage "--budget-seconds wants a positive whole number, got '$budget'"
compare_cap=${COMPARE_SECONDS:-150}
[[ $compare_cap =~ ^[0-9]+$ ]] || die_usage "COMPARE_SECONDS wants a whole number of seconds, got '$compare_cap'"

# The graphs to compare. tiny-llama:layer compiles in seconds and keeps dry
# mode quick; the full-size layers are what the GPU comparison is about
# (torch_bench.py knows the shapes of llama-3-8b, llama-3.2-1b and
# mistral-7b layers, MLPs and RMSNorms).
read -r -a graphs <<<"${GRAPHS:-tiny-llama:layer llama-3-8b:rmsnorm llama-3-8b:mlp llama-3-8b:layer}"
seq_len=${SEQ:-16}
dtype=${DTYPE:-bf16}
python=${PYTHON:-python3}

start_s=$SECONDS
deadline=$((start_s + budget))

# remaining prints the seconds left in the budget (never below 0).
remaining() {
	local r=$((deadline - SECONDS))
	((r > 0)) || r=0
	echo "$r"
}

# capped SECONDS CMD...: runs CMD with a time cap no larger than what is
# left of the budget, so one slow step cannot take the whole run. Without
# coreutils' timeout it runs uncapped (the budget is still checked between
# steps).
capped() {
	local cap=$1
	shift
	local left
	left=$(remaining)
	((cap < left)) || cap=$left
	if ((cap <= 0)); then
		echo "budget spent: skipped $*" >&2
		return 124
	fi
	if command -v timeout >/dev/null 2>&1; then
		timeout --kill-after=10 "$cap" "$@"
	else
		"$@"
	fi
}

mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/log.txt"
: >"$log"
# Tuning records that anything run here produces go beside the results.
export LUMSEARCH_TUNEDB="$out/tunedb.jsonl"

say() {
	echo "$*"
	echo "$*" >>"$log"
}

# --- the GPU -----------------------------------------------------------
# Detect the GPU even under --dry-run, so the log says what the machine has.
gpu_name=""
if command -v nvidia-smi >/dev/null 2>&1 && gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>>"$log" | head -n 1) && [[ -n $gpu_name ]]; then
	if ((dry_run)); then
		say "GPU: $gpu_name; --dry-run: dry mode"
	else
		say "GPU: $gpu_name"
	fi
else
	gpu_name=""
	dry_run=1
	say "no NVIDIA GPU: dry mode"
fi

# --- lumsearch ----------------------------------------------------------
if [[ -z $lumsearch ]]; then
	if [[ -x $script_dir/lumsearch ]]; then
		lumsearch=$script_dir/lumsearch
	else
		lumsearch=$(command -v lumsearch || true)
	fi
fi
if [[ -z $lumsearch || ! -x $lumsearch ]]; then
	echo "gpu-check.sh: no lumsearch binary (give --lumsearch PATH; build it with: go build -o lumsearch ./cmd/lumsearch)" >&2
	exit 1
fi
if ! lumsearch_version=$("$lumsearch" version 2>&1); then
	echo "gpu-check.sh: $lumsearch version failed: $lumsearch_version" >&2
	exit 1
fi
say "lumsearch: $lumsearch_version"

# "lumsearch bench" times a compiled program on the GPU; older builds lack
# it, and then the lumsearch column stays empty rather than failing.
# (The help text is read whole first: "grep -q" stops reading at its first
# match, and under pipefail the writer's SIGPIPE would fail the test.)
have_bench=0
help_text=$("$lumsearch" help 2>/dev/null || true)
if grep -qE '^[[:space:]]+bench[[:space:]]' <<<"$help_text"; then
	have_bench=1
else
	say "lumsearch bench: not available in this build; the lumsearch column is empty"
fi
# "bench --save" writes the tensors bench fed and the outputs it got, which
# PyTorch then runs on; older builds lack it, and PyTorch draws its own.
have_save=0
bench_help=$("$lumsearch" help bench 2>/dev/null || true)
if ((have_bench)) && grep -q -- '--save' <<<"$bench_help"; then
	have_save=1
elif ((have_bench)); then
	say "lumsearch bench --save: not available in this build; PyTorch runs on its own random inputs"
fi
# "bench --compare-kernels" runs each kernel of a compiled folder on the GPU
# and under the CPU emulation and compares them; older builds lack it.
have_compare=0
if ((have_bench)) && grep -q -- '--compare-kernels' <<<"$bench_help"; then
	have_compare=1
elif ((have_bench)); then
	say "lumsearch bench --compare-kernels: not available in this build; kernels are not compared with the emulation"
fi

# compare_kernels NAME DIR: runs each distinct kernel of the compiled folder
# DIR on the GPU and under the CPU emulation on the same inputs, each
# compared with the reference and with the other (lumsearch bench DIR
# --compare-kernels), capped at COMPARE_SECONDS and what is left of the
# budget; lumsearch's own --budget ends 15 s before the cap, so that it
# prints the table of what it compared. The table goes to
# OUT/compare-NAME.txt; compare_result is set to "agree", "DISAGREE",
# "incomplete" (the kernels not compared in time), or why it did not run.
compare_kernels() {
	local name=$1 dir=$2 file="$out/compare-$1.txt" cap left rc verdict
	compare_result=""
	if ((dry_run)); then
		compare_result="skipped (dry run)"
		return 0
	fi
	if ((!have_compare)); then
		compare_result="skipped (this build's bench has no --compare-kernels)"
		return 0
	fi
	left=$(remaining)
	cap=$compare_cap
	((cap < left)) || cap=$left
	if ((cap <= 30)); then
		compare_result="skipped (budget spent)"
		return 0
	fi
	say "compare the kernels of $dir on the GPU with the CPU emulation -> $file"
	if capped "$cap" "$lumsearch" bench "$dir" --compare-kernels --budget "$((cap - 15))s" >"$file" 2>>"$log"; then
		rc=0
	else
		rc=$?
	fi
	verdict=$(sed -n '/^verdict: /{s/^verdict: \([A-Za-z]*\).*/\1/p;q;}' "$file")
	if ((rc == 0)); then
		compare_result="agree"
	elif [[ -n $verdict ]]; then
		compare_result=$verdict
	elif ((rc == 124 || rc == 137)); then
		compare_result="ran out of time (see $(basename "$file"))"
	else
		compare_result="failed (exit $rc; see log.txt)"
	fi
	say "  kernels on the GPU against the emulation: $compare_result"
}

# --- PyTorch --------------------------------------------------------------
have_torch=0
torch_probe='{"torch": false, "reason": "PyTorch missing: no python3"}'
if command -v "$python" >/dev/null 2>&1; then
	if torch_probe=$(capped 60 "$python" "$script_dir/torch_bench.py" --probe 2>>"$log"); then
		if grep -q '"torch": true' <<<"$torch_probe"; then
			have_torch=1
		fi
	else
		torch_probe='{"torch": false, "reason": "PyTorch missing: torch_bench.py --probe failed; see log.txt"}'
	fi
fi
if ((have_torch)); then
	say "PyTorch: $torch_probe"
else
	say "PyTorch missing: the eager and torch.compile columns are empty ($torch_probe)"
fi

# json_num FIELD JSON: prints FIELD's number from a one-line JSON object,
# or nothing. Enough for the flat objects torch_bench.py and bench print.
json_num() {
	sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" <<<"$2" | head -n 1
}

# json_field FIELD JSON: prints FIELD's string value (without quotes or
# escapes inside) from a one-line JSON object, or nothing.
json_field() {
	sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" <<<"$2" | head -n 1
}

# json_str STRING: STRING as a JSON string literal.
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\t'/\\t}
	s=${s//$'\r'/}
	printf '"%s"' "$s"
}

# --- the ceilings ---------------------------------------------------------
ceilings='{"ok": false, "reason": "dry mode"}'
if ((!dry_run)); then
	if ((have_torch)); then
		say "measuring copy bandwidth and bf16 matmul rate ..."
		ceilings=$(capped 60 "$python" "$script_dir/torch_bench.py" --ceilings --time-cap 45 2>>"$log") ||
			ceilings='{"ok": false, "reason": "torch_bench.py --ceilings failed or ran out of time; see log.txt"}'
	else
		ceilings='{"ok": false, "reason": "PyTorch missing"}'
	fi
	say "ceilings: $ceilings"
fi
copy_gbs=$(json_num copy_gbs "$ceilings")
mm_tflops=$(json_num matmul_bf16_tflops "$ceilings")

# --- the graphs ---------------------------------------------------------
# Each graph gets an equal share of what is left, at most 120 s, split
# between compiling, lumsearch bench and PyTorch.
rows=()
graph_json=()
for g in "${graphs[@]}"; do
	left=$(remaining)
	share=$((left / ${#graphs[@]}))
	((share <= 120)) || share=120
	((share >= 10)) || share=10
	safe=${g//[^A-Za-z0-9._-]/_}
	cdir="$out/compile-$safe"
	sdir="$out/bench-$safe"
	compile_status="skipped"
	ls_ms="" eager_ms="" compile_ms="" nbytes="" flops="" notes=""
	# What PyTorch ran on ("lumsearch" or "random"), its worst relative L2
	# error against lumsearch's outputs and the verdict (true or false).
	torch_inputs="" ls_err="" ls_match="" saved=""

	# Compile. On a GPU machine verify under the emulation: numbers first.
	verify=false
	((dry_run)) || verify=true
	say "compile $g (--verify=$verify) -> $cdir"
	if capped "$share" "$lumsearch" compile "$g" --seq "$seq_len" --dtype "$dtype" --verify="$verify" -o "$cdir" >"$cdir.log" 2>&1; then
		compile_status="ok"
	else
		rc=$?
		compile_status="failed (exit $rc; see $(basename "$cdir").log)"
		# 124 and 137 are timeout's: the graph's share of the budget ran out.
		if ((rc == 124 || rc == 137)); then
			notes+="compile ran out of time; "
		else
			notes+="compile failed; "
		fi
	fi
	cat "$cdir.log" >>"$log"
	say "  compile: $compile_status"

	# lumsearch bench: assumed to print one JSON object with "ms" (median
	# milliseconds per run) after checking the program's outputs.
	# With --save it also writes inputs.safetensors, outputs.safetensors
	# and graph.txt into OUT/bench-NAME/ for PyTorch to run on.
	if ((have_bench && !dry_run)) && [[ $compile_status == ok ]]; then
		save_args=()
		((have_save)) && save_args=(--save "$sdir")
		if bench=$(capped "$share" "$lumsearch" bench "$cdir" --json ${save_args[@]+"${save_args[@]}"} 2>>"$log"); then
			ls_ms=$(json_num ms "$bench")
			echo "$bench" >"$out/bench-$safe.json"
			if [[ -f $sdir/inputs.safetensors && -f $sdir/outputs.safetensors ]]; then
				saved=$sdir
			fi
		else
			notes+="lumsearch bench failed; "
		fi
	fi

	# PyTorch eager and torch.compile, the same graph at the same shapes.
	# With lumsearch's saved tensors (--inputs) it compares its outputs
	# with lumsearch's before timing anything.
	if ((have_torch && !dry_run)); then
		inputs_args=()
		[[ -z $saved ]] || inputs_args=(--inputs "$saved")
		if tb=$(capped $((share + 15)) "$python" "$script_dir/torch_bench.py" --graph "$g" --seq "$seq_len" --dtype "$dtype" --time-cap "$share" ${inputs_args[@]+"${inputs_args[@]}"} 2>>"$log"); then
			echo "$tb" >"$out/torch-$safe.json"
			eager_ms=$(json_num eager_ms "$tb")
			compile_ms=$(json_num compile_ms "$tb")
			nbytes=$(json_num bytes "$tb")
			flops=$(json_num flops "$tb")
			torch_inputs=$(json_field inputs "$tb")
			ls_err=$(json_num max_rel_err_vs_lumsearch "$tb")
			if grep -q '"lumsearch_match": true' <<<"$tb"; then
				ls_match=true
			elif grep -q '"lumsearch_match": false' <<<"$tb"; then
				ls_match=false
			fi
			reason=$(sed -n 's/.*"\(compile_\)\{0,1\}reason": *"\([^"]*\)".*/\2/p' <<<"$tb" | head -n 1)
			[[ -z $reason ]] || notes+="$reason; "
			for field in lumsearch_reason inputs_reason; do
				reason=$(json_field "$field" "$tb")
				[[ -z $reason ]] || notes+="$reason; "
			done
			if [[ -z $saved && -n $eager_ms ]]; then
				notes+="PyTorch ran on its own random inputs (no tensors saved by lumsearch bench); "
			fi
		else
			notes+="PyTorch run failed or ran out of time; "
		fi
	fi
	notes=${notes%; }

	# The table's torch=ls? column: yes or NO with the worst relative L2
	# error when PyTorch ran on lumsearch's tensors, "own inputs" when it
	# ran on its own, empty when it did not run.
	match_cell=""
	if [[ $ls_match == true ]]; then
		match_cell="yes"
	elif [[ $ls_match == false ]]; then
		match_cell="NO"
	elif [[ -n $eager_ms && $torch_inputs != lumsearch ]]; then
		match_cell="own inputs"
	fi
	[[ -z $ls_err || -z $match_cell ]] || match_cell+=" $(awk -v e="$ls_err" 'BEGIN { printf "%.1e", e }')"

	rows+=("$g|$ls_ms|$eager_ms|$compile_ms|$nbytes|$flops|$match_cell|$notes")
	torch_inputs_json=null
	[[ -z $torch_inputs ]] || torch_inputs_json=$(json_str "$torch_inputs")
	saved_json=null
	[[ -z $saved ]] || saved_json=$(json_str "$saved")
	graph_json+=("$(printf '{"graph": %s, "compile": %s, "compile_dir": %s, "saved_dir": %s, "lumsearch_ms": %s, "eager_ms": %s, "torch_compile_ms": %s, "bytes": %s, "flops": %s, "torch_inputs": %s, "max_rel_err_vs_lumsearch": %s, "torch_matches_lumsearch": %s, "notes": %s}' \
		"$(json_str "$g")" "$(json_str "$compile_status")" "$(json_str "$cdir")" "$saved_json" \
		"${ls_ms:-null}" "${eager_ms:-null}" "${compile_ms:-null}" "${nbytes:-null}" "${flops:-null}" \
		"$torch_inputs_json" "${ls_err:-null}" "${ls_match:-null}" "$(json_str "$notes")")")
done

# --- one decode program at three positions ---------------------------------
# A decode step compiled once with its position a runtime extent (past over
# 0..DECODE_MAX_SEQ-1) is timed at three positions with bench --dim: its
# work follows past, not the cache's capacity.
decode_graph=${DECODE:-llama-3.2-1b:decode}
decode_max=${DECODE_MAX_SEQ:-8192}
read -r -a decode_positions <<<"${DECODE_POSITIONS:-128 1024 $((decode_max - 1))}"
decode_dir="$out/compile-decode"
decode_status="skipped"
decode_json=()
decode_line=""
decode_compare="skipped"
if (($(remaining) > 30)); then
	verify=false
	((dry_run)) || verify=true
	say "compile $decode_graph --max-seq $decode_max (--verify=$verify) -> $decode_dir"
	if capped 240 "$lumsearch" compile "$decode_graph" --max-seq "$decode_max" --dtype "$dtype" --verify="$verify" -o "$decode_dir" >"$decode_dir.log" 2>&1; then
		decode_status="ok"
	else
		decode_status="failed (exit $?; see $(basename "$decode_dir").log)"
	fi
	cat "$decode_dir.log" >>"$log"
	say "  compile: $decode_status"
	if [[ $decode_status == ok ]]; then
		compare_kernels decode "$decode_dir"
		decode_compare=$compare_result
	fi
	for p in "${decode_positions[@]}"; do
		ms=""
		if ((have_bench && !dry_run)) && [[ $decode_status == ok ]] && (($(remaining) > 10)); then
			if b=$(capped 120 "$lumsearch" bench "$decode_dir" --json --dim past="$p" 2>>"$log"); then
				ms=$(json_num ms "$b")
				echo "$b" >"$out/bench-decode-past$p.json"
			fi
		fi
		decode_json+=("$(printf '{"past": %s, "lumsearch_ms": %s}' "$p" "${ms:-null}")")
		decode_line+=" past=$p: ${ms:-?} ms;"
	done
fi

# --- one prefill layer --------------------------------------------------------
# A full-size layer at a prefill's length (PREFILL_SEQ tokens), benched
# without PyTorch: its per-kernel table (below) sets each kernel's measured
# time beside the cost model's.
prefill_graph=${PREFILL:-llama-3-8b:layer}
prefill_seq=${PREFILL_SEQ:-512}
prefill_dir="$out/compile-prefill"
prefill_status="skipped"
prefill_ms=""
prefill_compare="skipped"
if ((dry_run)); then
	prefill_status="skipped (dry run)"
	prefill_compare="skipped (dry run)"
elif (($(remaining) > 30)); then
	say "compile $prefill_graph --seq $prefill_seq -> $prefill_dir"
	if capped 180 "$lumsearch" compile "$prefill_graph" --seq "$prefill_seq" --dtype "$dtype" --verify=false -o "$prefill_dir" >"$prefill_dir.log" 2>&1; then
		prefill_status="ok"
		compare_kernels prefill "$prefill_dir"
		prefill_compare=$compare_result
		if ((have_bench && !dry_run)) && (($(remaining) > 10)); then
			if b=$(capped 150 "$lumsearch" bench "$prefill_dir" --json 2>>"$log"); then
				prefill_ms=$(json_num ms "$b")
				echo "$b" >"$out/bench-prefill.json"
			else
				prefill_status="ok, bench failed"
			fi
		fi
	else
		prefill_status="failed (exit $?; see $(basename "$prefill_dir").log)"
	fi
	cat "$prefill_dir.log" >>"$log"
fi
say "prefill $prefill_graph --seq $prefill_seq: $prefill_status${prefill_ms:+, $prefill_ms ms}"

# kernel_table FILE prints, per distinct kernel of a bench's JSON (one line,
# flat kernel objects), its launches, schedule, what the cost model says
# bounds it, the predicted and measured time of all its launches, their
# ratio and the bandwidth the measured time achieves on the model's bytes
# (with the copy ceiling's share when it was measured): the figures that
# calibrate the cost model kernel by kernel.
kernel_table() {
	sed -e 's/.*"kernels":\[//' -e 's/\].*//' "$1" | sed 's/},{/}\n{/g' | awk -v copy="$copy_gbs" '
	function field(name,   s) {
		if (match($0, "\"" name "\":\"[^\"]*\"")) { s = substr($0, RSTART, RLENGTH); sub(/^[^:]*:"/, "", s); sub(/"$/, "", s); return s }
		if (match($0, "\"" name "\":[-0-9.eE+]+")) { s = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", s); return s }
		return ""
	}
	{
		k = field("kernel")
		if (k == "") next
		if (!(k in n)) order[++count] = k
		n[k]++; pred[k] += field("predicted_ms"); meas[k] += field("median_ms"); bytes[k] += field("bytes")
		sched[k] = field("schedule"); bound[k] = field("bound")
	}
	END {
		if (count == 0) { print "  (no per-kernel times in this bench)"; exit }
		printf "  %-8s %4s %-44s %-10s %12s %12s %7s %14s\n", "kernel", "n", "schedule", "bound", "predicted", "measured", "meas/p", "GB/s (%copy)"
		for (i = 1; i <= count; i++) {
			k = order[i]
			r = (pred[k] > 0 && meas[k] > 0) ? sprintf("%.2f", meas[k] / pred[k]) : ""
			bw = ""
			if (meas[k] > 0 && bytes[k] > 0) {
				v = bytes[k] / (meas[k] / 1e3) / 1e9; bw = sprintf("%.0f", v)
				if (copy != "" && copy > 0) bw = bw sprintf(" (%.0f%%)", 100 * v / copy)
			}
			printf "  %-8s %4d %-44s %-10s %9.4f ms %9.4f ms %7s %14s\n", k, n[k], sched[k], bound[k], pred[k], meas[k], r, bw
		}
	}'
}

# --- serving on the GPU -----------------------------------------------------
# The tiny random-weight model (Llama 2's vocabulary) compiled as a serving
# step and served on the GPU (lumsearch serve --device gpu: the step and the
# sampling kernel on the device), driven by lumsearch loadgen with 32
# concurrent streamed requests. Needs the repository's serve/testdata and
# the shared data's Llama 2 tokenizer (SERVE_TOKENIZER); skipped in dry mode.
serve_status="skipped"
serve_line=""
serve_config=${SERVE_CONFIG:-$script_dir/../serve/testdata/tiny-llama2/config.json}
serve_tokenizer=${SERVE_TOKENIZER:-}
if [[ -z $serve_tokenizer ]]; then
	# The shared data sits beside the checkout, or inside a copy of it.
	for d in "$script_dir/../../shared" "$script_dir/../shared"; do
		[[ -e $d/data/tokenizers/llama2 ]] && serve_tokenizer="$d/data/tokenizers/llama2" && break
	done
fi
serve_dir="$out/compile-serve"
if ((dry_run)); then
	serve_status="skipped (dry run)"
elif ! "$lumsearch" help serve >/dev/null 2>&1; then
	serve_status="skipped (this build has no serve)"
elif [[ ! -f $serve_config || -z $serve_tokenizer ]]; then
	serve_status="skipped (no $serve_config, or no shared/data/tokenizers/llama2: set SERVE_TOKENIZER)"
elif (($(remaining) > 60)); then
	say "compile $serve_config:step -> $serve_dir, serve it on the GPU, loadgen 32 requests"
	if capped 120 "$lumsearch" compile "$serve_config:step" --max-tokens 256 --max-seqs 32 --max-seq 512 --verify=false -o "$serve_dir" >"$serve_dir.log" 2>&1; then
		port=${SERVE_PORT:-18123}
		"$lumsearch" serve "$serve_dir" --device gpu --port "$port" --host 127.0.0.1 --tokenizer "$serve_tokenizer" >"$out/serve.log" 2>&1 &
		serve_pid=$!
		for _ in $(seq 1 120); do
			grep -q "serving " "$out/serve.log" 2>/dev/null && break
			kill -0 "$serve_pid" 2>/dev/null || break
			sleep 0.5
		done
		if grep -q "serving " "$out/serve.log"; then
			if r=$(capped 120 "$lumsearch" loadgen --url "http://127.0.0.1:$port" --requests 32 --concurrency 32 --prompt-tokens 64 --output-tokens 64 --json 2>>"$log"); then
				echo "$r" >"$out/serve-loadgen.json"
				serve_status="ok"
				serve_line=" $(json_num completed "$r") of 32 completed, $(json_num output_token_rate "$r") output tok/s"
			else
				serve_status="loadgen failed (see log.txt, serve.log)"
			fi
		else
			serve_status="serve did not start (see serve.log)"
		fi
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
		cat "$out/serve.log" >>"$log"
	else
		serve_status="compile failed (see $(basename "$serve_dir").log)"
	fi
	cat "$serve_dir.log" >>"$log" 2>/dev/null || true
fi
say "serve: $serve_status$serve_line"

# compare_json NAME STATUS: the JSON of a kernel comparison: its status
# and the file holding its table (null when it did not run).
compare_json() {
	local file=null
	[[ ! -f $out/compare-$1.txt ]] || file=$(json_str "$out/compare-$1.txt")
	printf '{"status": %s, "file": %s}' "$(json_str "$2")" "$file"
}

# --- the table ----------------------------------------------------------
# Ratios are lumsearch's time over the other's (below 1: lumsearch faster).
# Achieved GB/s and TFLOP/s use lumsearch's time, else eager's, and are set
# against the measured ceilings as a percentage.
table=$(
	printf '%s\n' "${rows[@]}" | awk -F'|' -v copy="$copy_gbs" -v mm="$mm_tflops" '
	function num(s) { return s != "" }
	function f(fmt, v) { return sprintf(fmt, v) }
	BEGIN {
		printf "%-22s %10s %10s %10s %8s %8s %14s %16s %12s  %s\n", "graph", "lumsearch", "eager", "compile", "ls/eag", "ls/comp", "GB/s (%copy)", "TFLOP/s (%mm)", "torch=ls?", "notes"
	}
	{
		g = $1; ls = $2; eg = $3; co = $4; by = $5; fl = $6; mt = $7; note = $8
		r1 = (num(ls) && num(eg) && eg > 0) ? f("%.2f", ls / eg) : ""
		r2 = (num(ls) && num(co) && co > 0) ? f("%.2f", ls / co) : ""
		t = num(ls) ? ls : eg
		bw = ""; tf = ""
		if (num(t) && t > 0 && num(by)) {
			v = by / (t / 1e3) / 1e9; bw = f("%.0f", v)
			if (num(copy) && copy > 0) bw = bw f(" (%.0f%%)", 100 * v / copy)
		}
		if (num(t) && t > 0 && num(fl) && fl > 0) {
			v = fl / (t / 1e3) / 1e12; tf = f("%.1f", v)
			if (num(mm) && mm > 0) tf = tf f(" (%.0f%%)", 100 * v / mm)
		}
		printf "%-22s %10s %10s %10s %8s %8s %14s %16s %12s  %s\n", g, (num(ls) ? f("%.3f", ls) : ""), (num(eg) ? f("%.3f", eg) : ""), (num(co) ? f("%.3f", co) : ""), r1, r2, bw, tf, mt, note
	}'
)

mode="gpu"
((dry_run)) && mode="dry"
elapsed=$((SECONDS - start_s))
{
	echo "gpu-check: mode=$mode gpu=${gpu_name:-none} lumsearch=$lumsearch_version bench=$have_bench compare=$have_compare torch=$have_torch seq=$seq_len dtype=$dtype elapsed=${elapsed}s"
	echo "ceilings: copy ${copy_gbs:-?} GB/s, bf16 matmul ${mm_tflops:-?} TFLOP/s"
	echo "times in ms; ratios are lumsearch/eager and lumsearch/torch.compile"
	echo "torch=ls?: whether PyTorch eager and torch.compile, run on the inputs and weights lumsearch bench fed, gave lumsearch's outputs (worst relative L2 error); own inputs: PyTorch drew its own"
	echo "$table"
	echo "decode $decode_graph --max-seq $decode_max (one program, compile $decode_status):${decode_line:- not run}"
	echo "serve tiny-llama2 on the GPU: $serve_status$serve_line"
	echo "prefill $prefill_graph --seq $prefill_seq: $prefill_status${prefill_ms:+, $prefill_ms ms}"
	for f in "$out"/bench-decode-past*.json "$out"/bench-prefill.json; do
		[[ -f $f ]] || continue
		echo "kernels of $(basename "$f" .json) (measured against the cost model; sum over each kernel's launches):"
		kernel_table "$f"
	done
	echo "kernels on the GPU against the CPU emulation (bench --compare-kernels: errors in units of the verifier's allowance):"
	echo "  decode $decode_graph: $decode_compare"
	[[ ! -f $out/compare-decode.txt ]] || sed 's/^/    /' "$out/compare-decode.txt"
	echo "  prefill $prefill_graph --seq $prefill_seq: $prefill_compare"
	[[ ! -f $out/compare-prefill.txt ]] || sed 's/^/    /' "$out/compare-prefill.txt"
} >"$out/summary.txt"
echo
cat "$out/summary.txt"

{
	printf '{\n  "mode": %s,\n  "gpu": %s,\n  "lumsearch_version": %s,\n  "lumsearch_bench": %s,\n' \
		"$(json_str "$mode")" "$(json_str "$gpu_name")" "$(json_str "$lumsearch_version")" "$( ((have_bench)) && echo true || echo false)"
	printf '  "torch_probe": %s,\n  "ceilings": %s,\n  "seq": %s,\n  "dtype": %s,\n  "budget_seconds": %s,\n  "elapsed_seconds": %s,\n' \
		"$torch_probe" "$ceilings" "$seq_len" "$(json_str "$dtype")" "$budget" "$elapsed"
	printf '  "tunedb": %s,\n  "graphs": [\n' "$(json_str "$LUMSEARCH_TUNEDB")"
	for i in "${!graph_json[@]}"; do
		sep=","
		((i == ${#graph_json[@]} - 1)) && sep=""
		printf '    %s%s\n' "${graph_json[$i]}" "$sep"
	done
	printf '  ],\n  "decode": {"graph": %s, "max_seq": %s, "compile": %s, "compile_dir": %s, "positions": [' \
		"$(json_str "$decode_graph")" "$decode_max" "$(json_str "$decode_status")" "$(json_str "$decode_dir")"
	for i in "${!decode_json[@]}"; do
		sep=", "
		((i == ${#decode_json[@]} - 1)) && sep=""
		printf '%s%s' "${decode_json[$i]}" "$sep"
	done
	printf '], "kernel_compare": %s},\n  "prefill": {"graph": %s, "seq": %s, "status": %s, "lumsearch_ms": %s, "kernel_compare": %s},\n' \
		"$(compare_json decode "$decode_compare")" "$(json_str "$prefill_graph")" "$prefill_seq" "$(json_str "$prefill_status")" "${prefill_ms:-null}" "$(compare_json prefill "$prefill_compare")"
	printf '  "serve": {"status": %s, "loadgen": %s}\n}\n' "$(json_str "$serve_status")" "$(cat "$out/serve-loadgen.json" 2>/dev/null || echo null)"
} >"$out/results.json"
echo
echo "wrote $out/results.json, $out/summary.txt and $out/log.txt (tuning records, if any: $LUMSEARCH_TUNEDB)"

#!/usr/bin/env bash
# Every GPU figure of the docs' results tables (docs/benchmarks.md and the algorithm pages), in parts that each fit one device call (10 minutes).
#
#   bench/gpu.sh PART... OUT_DIR          on the GPU machine, from the repository root (PART: part1 ... part12)
#   bench/gpu.sh --dry [PART...] OUT_DIR  every part (or those named) at toy sizes on this machine's CPU
#
# Through the device tool, after `make gpu-kit` here (the wheels the GPU machine's Python lacks, in .gpu-kit/):
#   run(command="bash bench/gpu.sh part1 $OUT", carry=[".gpu-kit"], timeout_s=600)
# then part3, part2, part4, ... (highest value first). A session's 15 device minutes hold two parts if the second
# follows on the still-warm machine at once: on an H200, part1 took 234 s and part3 391 s, and 494 s with the
# learner measured in it (2026-11-27).
# Each part installs the kit into $SITE (unless it is there already), runs its steps, and writes
# <bench>.<machine>.json into OUT_DIR, the names bench/results/ uses (learner.h100-16core.json, ...): copy the
# .json files into bench/results/ and commit them. Per part, a log (gpu-partN.<machine>.log) lands beside them.
#
#   part1  CUDA tests (graph capture, compile fallback, numerics against eager) -> pytest-cuda.T.json
#          bench.learner --device cuda --compile: PPO / DDPG / TD3 / SAC / CrossQ steps against the eager reference
#          -> learner.T.json
#          bench.learner --replicas 1 --device cuda: one rank of a data-parallel learner (a group of one on NCCL: the
#          all-reduce, no CUDA graph) against the learner alone -> learner-group.T.json
#   part2  the same on this machine's CPU, and what device=auto picks -> learner-cpu.T.json
#   part3  the GPU learner's cost for the capacity model (bench.capacity --measure-learner) -> capacity-learner.T.json
#          bench.throughput, 1 2 4 8 14 actors, GPU learner -> throughput.T.json
#   part4  whether the cores are shared (bench.core_sharing: a raw actor alone, beside 4 busy processes, 5 at once)
#          -> core-sharing.T.json; the throughput with the CPU learner -> throughput-cpu-learner.T.json
#   part5  PPO HalfCheetah-v5, 1M steps, seeds 1 2 3 side by side -> learning-ppo-HalfCheetah-v5.T.json
#   part6  DDPG HalfCheetah-v5, 300k steps (DDPG_STEPS) -> learning-ddpg-HalfCheetah-v5.T.json
#   part7  TD3 HalfCheetah-v5, as many -> learning-td3-HalfCheetah-v5.T.json
#   part8  robosuite Lift, 14 actors: raw and system env steps/s, a short DDPG/TD3 run
#          -> throughput-robosuite-Lift.T.json, learning-ddpg-robosuite-Lift.T.json
#   part9  SAC HalfCheetah-v5, 300k steps, seeds 1 2 side by side -> learning-sac-HalfCheetah-v5.T.json
#   part10 CrossQ (preset=crossq) the same -> learning-crossq-HalfCheetah-v5.T.json
#   part11 bench.inference, 14 actors x 4 envs on Pendulum-v1: per-actor against central inference (one worker; it
#          runs the policy on its CPU), a 64-64 and a 3x1024 MLP -> inference.T.json
#   part12 Atari: bench.atari_ppo, PPO from pixels on ALE/Pong-v5 (preset=ppo-atari), 14 actors x 8 envs, the CNN
#          learner on the GPU compiled (channels-last): env frames/s with learning on against raw ale-py on 14
#          cores, and the learner's samples/s alone -> atari-ppo.T.json; the same learner alone under
#          algo.autocast=bf16 -> atari-ppo-bf16.T.json (its system run short)
#
# T is the machine (TAG, default from the GPU: h100-16core, h200-16core; `dry` with --dry). A step that fails is
# logged and the part goes on with the next; the exit status says whether any failed.
# Environment: PYTHON (python3), KIT (.gpu-kit), SITE (where the kit installs: /tmp/surreal-kit), TAG, WORK (run
# folders and scratch files, not brought back: a temporary folder), JOBS (--dry only: parts at a time, 2).
set -euo pipefail

usage() {
	sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PY=${PYTHON:-python3}
KIT=${KIT:-.gpu-kit}
SITE=${SITE:-/tmp/surreal-kit}
ALL_PARTS=(part1 part2 part3 part4 part5 part6 part7 part8 part9 part10 part11 part12)

DRY=0
PARTS=()
POSITIONAL=()
for arg in "$@"; do
	case "$arg" in
	--dry) DRY=1 ;;
	-h | --help) usage ;;
	-*) echo "unknown option $arg" >&2 && usage ;;
	*) POSITIONAL+=("$arg") ;;
	esac
done
[ ${#POSITIONAL[@]} -ge 1 ] || usage
OUT_DIR=${POSITIONAL[-1]}
unset 'POSITIONAL[-1]'
for part in "${POSITIONAL[@]}"; do
	case "$part" in
	all) PARTS+=("${ALL_PARTS[@]}") ;;
	part[1-9] | part1[012]) PARTS+=("$part") ;;
	*) echo "unknown part $part (part1 ... part12, or all)" >&2 && usage ;;
	esac
done
if [ ${#PARTS[@]} -eq 0 ]; then
	[ "$DRY" = 1 ] || { echo "name the part(s) to run: each real part fills one device call" >&2 && usage; }
	PARTS=("${ALL_PARTS[@]}")
fi
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/surreal-gpu.XXXXXX")}
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1

# -- the kit ----------------------------------------------------------------------------------------------------
install_kit() {
	if [ "$DRY" = 1 ]; then
		echo "dry: the kit is not installed; $PY runs with its own packages"
		export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
		return
	fi
	local wheels=("$KIT"/*.whl)
	[ -e "${wheels[0]}" ] || {
		echo "no wheels in $KIT: run make gpu-kit on a machine with an index, and carry [\"$KIT\"]" >&2
		exit 1
	}
	local stamp
	stamp=$(ls -l "${wheels[@]}" | sha256sum | cut -c1-16)
	if [ "$(cat "$SITE/.kit-stamp" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$SITE"
		"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${wheels[@]}"
		echo "$stamp" >"$SITE/.kit-stamp"
	fi
	export PYTHONPATH="$SITE:$REPO/src"
	"$PY" -c "import torch, zmq, hydra, gymnasium, mujoco, surreal; assert torch.cuda.is_available(), 'no CUDA device'"
}

machine_tag() {
	if [ -n "${TAG:-}" ]; then
		echo "$TAG"
	elif [ "$DRY" = 1 ]; then
		echo dry
	else
		"$PY" -c "import torch; from bench.learner import machine_tag; print(machine_tag(torch.device('cuda')))"
	fi
}

# -- steps ------------------------------------------------------------------------------------------------------
FAILED=()
step() { # step NAME LIMIT_S COMMAND...: run under a time limit (the whole process group), output into the log
	local name=$1 limit=$2
	shift 2
	[ "$DRY" = 0 ] || limit=900 # toy sizes: the limit only catches a hang, however busy the machine
	echo "== $name ($(date -u +%H:%M:%S) UTC, limit ${limit} s): $*" | tee -a "$LOG"
	if timeout -k 30 "$limit" "$@" 2>&1 | tee -a "$LOG"; then
		echo "== $name: ok" | tee -a "$LOG"
	else
		echo "== $name: FAILED (exit ${PIPESTATUS[0]})" | tee -a "$LOG"
		FAILED+=("$name")
	fi
}

pytest_json() { # the junit XML of a pytest run as pytest-cuda.T.json
	"$PY" - "$1" "$2" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
import torch
junit, out = sys.argv[1:]
cases = []
for case in ET.parse(junit).getroot().iter("testcase"):
    outcome, message = "passed", None
    for tag in ("failure", "error", "skipped"):
        found = case.find(tag)
        if found is not None:
            outcome, message = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag], found.get("message")
    cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                  "seconds": float(case.get("time", 0)), "message": message})
count = lambda outcome: sum(c["outcome"] == outcome for c in cases)
cuda = torch.cuda.is_available()
result = {"benchmark": "pytest-cuda", "torch": torch.__version__, "cuda": torch.version.cuda,
          "device_name": torch.cuda.get_device_name() if cuda else "cpu", "tests": len(cases),
          **{k: count(k) for k in ("passed", "failed", "error", "skipped")}, "cases": cases}
open(out, "w").write(json.dumps(result) + "\n")
print(json.dumps({k: v for k, v in result.items() if k != "cases"}))
EOF
}

# Sizes: full on the GPU machine, toy with --dry (the same commands, so the script cannot rot between GPU runs).
if [ "$DRY" = 1 ]; then
	GPU=cpu
	export OMP_NUM_THREADS=1 # the toy sizes gain nothing from threads; a busy 2-core box loses to oversubscription
	LEARNER_SIZE=(--quick --updates 1 --seconds 0)
	LEARNER_GROUP_SIZE=(--updates 1 --rounds 1)
	LEARNER_GPU_ALGOS=(--algo td3 sac crossq) # with part2's ppo ddpg, every row kind once
	LEARNER_CPU_ALGOS=(--algo ppo ddpg)
	COMPILE=()
	COMPILE_RUN=learner.compile=false # compiling costs a small CPU ~20 s a learner
	ACTORS=(1)
	THROUGHPUT_SIZE=(--seconds 3 --raw-seconds 1 --envs-per-actor 1 --chunk-steps 64 --min-batch 128)
	CAPACITY_SECONDS=0.2
	CORE_SHARING_SIZE=(--seconds 0.5 --busy 1 --actors 1)
	PPO_SIZE=(--steps 512 --seeds 1 --actors 1 --timeout 600 env.kwargs.max_episode_steps=100 algo.batch_size=256
		algo.minibatch_size=128 algo.update_epochs=1 learner.eval_episodes=1)
	DDPG_SIZE=(--steps 600 --actors 1 --timeout 600 env.kwargs.max_episode_steps=100 algo.learning_starts=300
		algo.batch_size=32 learner.eval_episodes=1)
	SAC_SIZE=(--steps 400 --seeds 1 --actors 1 --timeout 600 env.kwargs.max_episode_steps=100
		algo.learning_starts=200 algo.batch_size=32 algo.replay_ratio=0.25 learner.eval_episodes=1
		learner.eval_interval=100)
	CROSSQ_TOY=("algo.critic_hidden_sizes=[64,64]") # the 2048-wide critics are the GPU's
	LIFT_ACTORS=(1)
	LIFT_THROUGHPUT_SIZE=(--seconds 3 --raw-seconds 1 --chunk-steps 16 --min-batch 32 env.kwargs.horizon=20)
	LIFT_LEARNING_SIZE=(--steps 100 --actors 1 --timeout 600 algo.learning_starts=40 algo.batch_size=16
		learner.eval_episodes=1 env.kwargs.horizon=20)
	PYTEST_SELECT=(-m "not slow")
	INFERENCE_SIZE=(--actors 2 --envs 2 --seconds 2 --warmup 1)
	# One actor, a 128-transition batch of 16-step chunks, a 20 s window (the toy learner's first updates).
	ATARI_SIZE=(--actors 1 --seconds 20 --raw-frames 2000 --raw-cores 1 --actor-steps 8 --learner-updates 1
		algo.batch_size=128 algo.minibatch_size=64 algo.update_epochs=1 actor.chunk_steps=16)
	ATARI_BF16_SIZE=("${ATARI_SIZE[@]}")
else
	GPU=cuda
	LEARNER_SIZE=(--seconds 20)
	LEARNER_GROUP_SIZE=(--updates 10 --rounds 2)
	LEARNER_GPU_ALGOS=(--algo ppo ddpg td3 sac crossq)
	LEARNER_CPU_ALGOS=(--algo ppo ddpg td3 sac)
	COMPILE=(--compile)
	COMPILE_RUN=learner.compile=true # on CUDA: compiled losses, steps replayed as CUDA graphs
	ACTORS=(1 2 4 8 14)
	THROUGHPUT_SIZE=(--seconds 50 --raw-seconds 15)
	CAPACITY_SECONDS=3
	CORE_SHARING_SIZE=(--seconds 8 --busy 4 --actors 5)
	PPO_SIZE=(--steps 1000000 --seeds 1 2 3 --parallel --actors 3 --timeout 450 topology.envs_per_actor=4)
	# The evaluator every 25k env steps: when 9,000 was first reached within the 300k, not only at the end.
	DDPG_SIZE=(--steps "${DDPG_STEPS:-300000}" --actors 8 --timeout 450 learner.eval_interval=25000)
	SAC_SIZE=(--steps "${SAC_STEPS:-300000}" --seeds 1 2 --parallel --actors 4 --timeout 450 learner.eval_interval=25000)
	CROSSQ_TOY=()
	LIFT_ACTORS=(14)
	LIFT_THROUGHPUT_SIZE=(--seconds 90 --raw-seconds 30 --chunk-steps 32 --min-batch 256)
	LIFT_LEARNING_SIZE=(--steps 200000 --actors 14 --timeout 210)
	PYTEST_SELECT=()
	# 14 actors + the worker + the learner (device=cpu in every configuration alike) on the 16 cores.
	INFERENCE_SIZE=(--actors 14 --envs 4 --seconds 40 --warmup 15)
	ATARI_SIZE=(--actors 14 --seconds 240 --raw-cores 14 --learner-updates 5)
	ATARI_BF16_SIZE=(--actors 14 --seconds 60 --raw-cores 14 --learner-updates 5)
fi
TD3=(algo.twin_critics=true algo.target_policy_noise=0.2)

part1() {
	step pytest-cuda 200 "$PY" -m pytest -q -p no:cacheprovider -o addopts= "${PYTEST_SELECT[@]}" \
		--junitxml "$WORK/junit.xml" tests/test_ppo.py tests/test_ppo_recurrent.py tests/test_ppo_pixels.py tests/test_ddpg.py tests/test_sac.py tests/test_flow.py tests/test_inference.py \
		-k "cuda or compile or device_auto or minibatches_have_one_shape"
	pytest_json "$WORK/junit.xml" "$OUT_DIR/pytest-cuda.$T.json" 2>&1 | tee -a "$LOG" || FAILED+=(pytest-json)
	step learner-gpu 330 "$PY" -m bench.learner --device "$GPU" "${COMPILE[@]}" "${LEARNER_SIZE[@]}" \
		"${LEARNER_GPU_ALGOS[@]}" --out "$OUT_DIR/learner.$T.json"
	step learner-rank 200 "$PY" -m bench.learner --replicas 1 --device "$GPU" "${LEARNER_GROUP_SIZE[@]}" \
		--out "$OUT_DIR/learner-group.$T.json"
}

part2() {
	step learner-cpu 500 "$PY" -m bench.learner --device cpu "${COMPILE[@]}" "${LEARNER_SIZE[@]}" \
		"${LEARNER_CPU_ALGOS[@]}" --device-auto --out "$OUT_DIR/learner-cpu.$T.json"
}

throughput() { # throughput NAME DEVICE FILE
	step "$1" 530 "$PY" -m bench.throughput "$COMPILE_RUN" --device "$2" \
		"${THROUGHPUT_SIZE[@]}" --runs-root "$WORK/runs" --out "$OUT_DIR/$3" --actors "${ACTORS[@]}"
}

part3() {
	step capacity-learner 150 "$PY" -m bench.capacity --measure-learner "$GPU" --seconds "$CAPACITY_SECONDS" \
		--out "$OUT_DIR/capacity-learner.$T.json"
	throughput throughput-gpu-learner "$GPU" "throughput.$T.json"
}
part4() {
	step core-sharing 150 "$PY" -m bench.core_sharing "${CORE_SHARING_SIZE[@]}" --out "$OUT_DIR/core-sharing.$T.json"
	throughput throughput-cpu-learner cpu "throughput-cpu-learner.$T.json"
}

learning() { # learning NAME LIMIT_S FILE ARGS...
	local name=$1 limit=$2 file=$3
	shift 3
	step "$name" "$limit" "$PY" -m bench.learning "$@" device="$GPU" "$COMPILE_RUN" --runs-root "$WORK/runs" \
		--out "$OUT_DIR/$file"
}

part5() { learning ppo-halfcheetah 530 "learning-ppo-HalfCheetah-v5.$T.json" ppo HalfCheetah-v5 "${PPO_SIZE[@]}"; }
part6() { learning ddpg-halfcheetah 530 "learning-ddpg-HalfCheetah-v5.$T.json" ddpg HalfCheetah-v5 "${DDPG_SIZE[@]}"; }
part7() {
	learning td3-halfcheetah 530 "learning-td3-HalfCheetah-v5.$T.json" ddpg HalfCheetah-v5 "${DDPG_SIZE[@]}" "${TD3[@]}"
}

part8() {
	step throughput-lift 240 "$PY" -m bench.throughput "${LIFT_THROUGHPUT_SIZE[@]}" --env robosuite:Lift \
		--envs-per-actor 1 --device "$GPU" --runs-root "$WORK/runs" \
		--out "$OUT_DIR/throughput-robosuite-Lift.$T.json" --actors "${LIFT_ACTORS[@]}"
	learning td3-lift 270 "learning-ddpg-robosuite-Lift.$T.json" ddpg robosuite:Lift "${LIFT_LEARNING_SIZE[@]}" "${TD3[@]}"
}

# SAC at its packaged defaults (one gradient step per env step) and CrossQ, two seeds at once (the issue's bar:
# 9,000 within 300k env steps on 2 seeds), each seed's learner compiled on the one GPU.
part9() { learning sac-halfcheetah 530 "learning-sac-HalfCheetah-v5.$T.json" sac HalfCheetah-v5 "${SAC_SIZE[@]}"; }
part10() {
	learning crossq-halfcheetah 530 "learning-crossq-HalfCheetah-v5.$T.json" sac HalfCheetah-v5 "${SAC_SIZE[@]}" \
		preset=crossq "${CROSSQ_TOY[@]}"
}

# Central against per-actor inference (docs/scaling.md, "Central inference"): four `surreal run`s, each a warm-up and
# a window of the actors' own env step counters; the 2-core row's env and envs per actor, at 14 actors.
part11() {
	step inference 530 "$PY" -m bench.inference --env Pendulum-v1 "${INFERENCE_SIZE[@]}" --workers 1 \
		--machine "$T" --runs-root "$WORK/runs" --out "$OUT_DIR/inference.$T.json"
}

# PPO from pixels (docs/gpu.md, "Atari"): the system's env frames/s against raw ale-py on as many cores, and the CNN
# learner alone, in float32 and then under bf16 autocast.
part12() {
	step atari-ppo 480 "$PY" -m bench.atari_ppo --device "$GPU" "${COMPILE[@]}" "${ATARI_SIZE[@]}" \
		--runs-root "$WORK/runs" --out "$OUT_DIR/atari-ppo.$T.json"
	step atari-ppo-bf16 300 "$PY" -m bench.atari_ppo --device "$GPU" "${COMPILE[@]}" --autocast bf16 \
		"${ATARI_BF16_SIZE[@]}" --runs-root "$WORK/runs" --out "$OUT_DIR/atari-ppo-bf16.$T.json"
}

# -- run ----------------------------------------------------------------------------------------------------------
install_kit
T=$(machine_tag)
JOBS=${JOBS:-2}
if [ "$DRY" = 1 ] && [ "$JOBS" -gt 1 ] && [ ${#PARTS[@]} -gt 1 ]; then
	# Toy parts are independent: $JOBS at a time keep a small box's cores busy through the runs' start-up waits.
	# Each runs as its own invocation of this script, with a folder of its own for run folders.
	echo "machine $T; parts ${PARTS[*]}, $JOBS at a time; results into $OUT_DIR; run folders in $WORK"
	status=0
	printf '%s\n' "${PARTS[@]}" |
		xargs -P "$JOBS" -I{} env JOBS=1 TAG="$T" WORK="$WORK/{}" bash "$REPO/bench/gpu.sh" --dry {} "$OUT_DIR" ||
		status=$?
	if [ "$status" != 0 ]; then
		mapfile -t FAILED < <(grep -h '^== .*: FAILED' "$OUT_DIR"/gpu-part*."$T".log | cut -d' ' -f2 | tr -d :)
		[ ${#FAILED[@]} -gt 0 ] || FAILED=("a part (exit $status)")
	fi
else
	echo "machine $T; parts ${PARTS[*]}; results into $OUT_DIR; run folders in $WORK"
	for part in "${PARTS[@]}"; do
		LOG="$OUT_DIR/gpu-$part.$T.log"
		: >"$LOG"
		"$part"
	done
fi
ls -l "$OUT_DIR"
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "failed steps: ${FAILED[*]}" >&2
	exit 1
fi
echo "all steps passed"

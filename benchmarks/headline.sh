#!/usr/bin/env bash
# The headline runs under the clean protocol (issue 29): every choice on a validation split, the
# test split scored once by the run itself when it ends (summary.json "test"), a budget fixed
# before the run. Resumable: a cell with a run directory is continued, a finished one skipped.
# One thread per run (pin each to a core), except mnist-30min and mnist-30min-patch7, which time two cores.
#   taskset -c 0 benchmarks/headline.sh bit-memory 0 1 2     # one core, one thread
#   taskset -c 1 benchmarks/headline.sh etth1-96 0
#
# Bit Memory: fast recipe (fp32 where bf16 is emulated) at a constant rate after its warm-up,
# 1,000 steps. Chosen on the held-out (validation) set alone: the earlier fast-recipe runs, whose
# cosine over 20,000 steps kept the rate within 1% of constant to step 1,000, passed 99% there at
# steps 600-800 on three seeds; a first try with the cosine over the 1,000 steps instead
# (bit-memory-fpt-fast1k-seed0) ended at 98.57% on validation, its rate decayed before it had
# learned. The test set (a second seed) was drawn after all of them and is scored once per run.
set -euo pipefail
{ # the whole script in braces: bash reads it all before running, so an edit while a run goes on is safe
cd "$(dirname "$0")/.."
OUT=benchmarks/results/headline
fpt=.venv/bin/fpt  # `make setup`'s environment; else the fpt a pip install put on PATH
[ -x "$fpt" ] || fpt=fpt
task=$1; shift
for seed in "$@"; do
  threads=1
  case $task in
    bit-memory-cosine) name=bit-memory-fpt-fast1k-seed$seed
                args=(--task bit-memory --recipe fast --precision fp32 --steps 1000 --eval-every 100) ;;
    bit-memory) name=bit-memory-fpt-fast1k-constant-seed$seed
                args=(--task bit-memory --recipe fast --lr-schedule constant --precision fp32 --steps 1000
                      --eval-every 100) ;;
    # the same in bf16 (--precision auto's pick where bf16 is native): the fourth precision for the
    # time-to-accuracy rows (issue 34), one thread as the other three
    bit-memory-bf16) name=bit-memory-fpt-fast1k-constant-bf16-seed$seed
                     args=(--task bit-memory --recipe fast --lr-schedule constant --precision bf16 --steps 1000
                           --eval-every 100) ;;
    # the same with the frozen weights stored in int8 (one scale per 128 weights of an output channel,
    # products in fp32): the accuracy int8 storage costs, measured against the fp32 cell above (issue 34)
    bit-memory-int8) name=bit-memory-fpt-fast1k-constant-int8-seed$seed
                     args=(--task bit-memory --recipe fast --lr-schedule constant --precision int8 --steps 1000
                           --eval-every 100) ;;
    # the same with those int8 weights' products in bf16 (--precision int8-bf16): on a CPU with native bf16
    bit-memory-int8-bf16) name=bit-memory-fpt-fast1k-constant-int8-bf16-seed$seed
                          args=(--task bit-memory --recipe fast --lr-schedule constant --precision int8-bf16
                                --steps 1000 --eval-every 100) ;;
    # MNIST: 5,000 training images held out as validation (the same for every seed), fast recipe
    # (fp32 where bf16 is emulated), 16,000 steps with the cosine over all of them. The budget is
    # the earlier headline's, first picked after an 8,000-step run missed 98 on test, so it is not
    # clean of that look; it is fixed here before any of these runs, none of which sees test
    # before its end, and their validation curves say whether it was still rising when it ended.
    mnist) name=mnist-fpt-fast16k-val5k-seed$seed
           args=(--task mnist --val-size 5000 --recipe fast --precision fp32 --steps 16000 --eval-every 1000) ;;
    # MNIST in 30 minutes of two cores (issue 34, item 5), on a CPU with native bf16 (AVX512-BF16 or AMX):
    # the cell above in bf16 with a budget that fits 30 minutes there: 5,000 steps, 30 minutes less about
    # 90 s of evaluations and start-up, over the 0.317 s a bf16 step of the MNIST shape took on two idle
    # cores of an AMD EPYC with AVX512-BF16 (benchmarks/results/int8/step_zen4.json as first committed, in
    # 5808007; a rerun read 0.298 s). Wall-clock arithmetic alone, fixed before the run; two threads (the
    # other cells: one).
    mnist-30min) name=mnist-fpt-fast5k-val5k-bf16-seed$seed threads=2
                 args=(--task mnist --val-size 5000 --recipe fast --precision bf16 --steps 5000 --eval-every 1000) ;;
    # the same in --precision int8-bf16 on one thread: what int8 weights cost MNIST at that budget (issue 34)
    mnist-30min-int8-bf16) name=mnist-fpt-fast5k-val5k-int8-bf16-seed$seed
                           args=(--task mnist --val-size 5000 --recipe fast --precision int8-bf16 --steps 5000
                                 --eval-every 1000) ;;
    # MNIST in 30 minutes of two cores with 7x7 patches (16 tokens of 49 pixels, against 49 of 16): about a
    # third of the tokens, so about three times the steps in the same time. Budget by wall-clock arithmetic
    # before the run: 30 minutes less about 90 s of evaluations over the slowest interval of a 667-step
    # timing run on two idle cores (125 ms a step; headline/mnist-patch7-steptime, AMD EPYC with
    # AVX512-BF16): 13,680, rounded down to 13,000. The patch size is chosen against mnist-30min's on
    # validation (val split, both 5,000 held-out images).
    mnist-30min-patch7) name=mnist-fpt-fast13k-patch7-val5k-bf16-seed$seed threads=2
                        args=(--task mnist --patch-size 7 --val-size 5000 --recipe fast --precision bf16 --steps 13000
                              --eval-every 1000) ;;
    # ETTh1 or ETTh2 at horizon 96, 192, 336 or 720, look-back 336 (fpt data get ett first): the
    # fast recipe as chosen on MNIST and Fashion-MNIST validation, not tuned for forecasts; 1,500
    # steps (0.84 epochs at batch 32 for horizon 96), a budget fixed for our CPUs before any run
    # and the same at every horizon; the whole validation split at the end.
    etth[12]-96|etth[12]-192|etth[12]-336|etth[12]-720)
      name=$task-fpt-fast1500-seed$seed
      args=(--task "ett:ETTh${task:4:1}" --horizon "${task#*-}" --recipe fast --precision fp32 --steps 1500
            --eval-every 250) ;;
    # JapaneseVowels (UEA, bundled with sktime): 50 of the 270 training series held out as
    # validation; 1,000 steps (about 145 epochs of the 220 left), fixed before the run.
    japanese-vowels) name=japanese-vowels-fpt-fast1k-val50-seed$seed
                     args=(--task ucr --dataset JapaneseVowels --val-size 50 --recipe fast --precision fp32
                           --steps 1000 --eval-every 100) ;;
    # the same without z-normalising each series (its cepstral coefficients' levels kept): chosen
    # on validation after the z-normalised run read 80% there
    japanese-vowels-raw) name=japanese-vowels-fpt-fast1k-val50-raw-seed$seed
                         args=(--task ucr --dataset JapaneseVowels --val-size 50 --no-znorm --recipe fast
                               --precision fp32 --steps 1000 --eval-every 100) ;;
    # NOT a clean run: One Fits All's protocol, to read its published 98.6 against. Its classification
    # script passes the test files as its validation set (--val_pattern TEST) and reports the best
    # accuracy over 27 evaluations (epochs 0, 1 and every second to 50). The same here: every
    # training series trained on, the test split watched every 37 steps (27 evaluations, then the last at 1,000)
    japanese-vowels-raw-test-watched) name=japanese-vowels-fpt-fast1k-raw-test-watched-seed$seed
                                      args=(--task ucr --dataset JapaneseVowels --no-znorm --recipe fast
                                            --precision fp32 --steps 1000 --eval-every 37) ;;
    # BasicMotions (UEA, bundled with sktime): 8 of the 40 training series held out as validation, the
    # z-normalised series (the UCR habit; no choice made on it), 1,000 steps, fixed before the run
    basic-motions) name=basic-motions-fpt-fast1k-val8-seed$seed
                   args=(--task ucr --dataset BasicMotions --val-size 8 --recipe fast --precision fp32 --steps 1000
                         --eval-every 100) ;;
    # the same without z-normalising each series: the four activities differ in how hard the sensors
    # move, which z-normalising removes (as JapaneseVowels' levels); tried after the z-normalised run
    # read 62.5% on its 8 validation series
    basic-motions-raw) name=basic-motions-fpt-fast1k-val8-raw-seed$seed
                       args=(--task ucr --dataset BasicMotions --val-size 8 --no-znorm --recipe fast --precision fp32
                             --steps 1000 --eval-every 100) ;;
    *) echo "unknown task $task" >&2; exit 2 ;;
  esac
  dir=$OUT/$name
  if [[ -f $dir/summary.json ]]; then echo "$name: finished"; continue; fi
  if [[ -f $dir/checkpoint.safetensors ]]; then
    HF_HUB_OFFLINE=1 "$fpt" train --resume "$dir" --threads "$threads" --no-progress
  else
    rm -rf "$dir"
    HF_HUB_OFFLINE=1 "$fpt" train "${args[@]}" --seed "$seed" --threads "$threads" --out "$dir" --no-progress
  fi
done
exit
}

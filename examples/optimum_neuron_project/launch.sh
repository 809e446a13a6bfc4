#!/bin/bash
# Compile the inference model ahead of time, then fine-tune on a trn1.32xlarge.
set -e

export XLA_USE_BF16=1
export NEURON_CC_FLAGS="--model-type transformer --distribution-strategy=llm-training"
export NEURON_FUSE_SOFTMAX=1
export MALLOC_ARENA_MAX=64

PROCESSES_PER_NODE=8
MODEL_ID="meta-llama/Llama-3.2-1B"
DATASET_PATH="data/train.jsonl"

# 1. Export the generation model used by inference.py
optimum-cli export neuron --model Qwen/Qwen2.5-0.5B-Instruct --batch_size 1 --sequence_length 512 --num_cores 2 --auto_cast_type bf16 compiled_model/

# 2. Extract and pre-compile the training graphs (populates the Neuron compile cache)
neuron_parallel_compile torchrun --nproc_per_node=$PROCESSES_PER_NODE train.py \
    --model_id $MODEL_ID \
    --dataset_path $DATASET_PATH \
    --tensor_parallel_size 8 \
    --zero_1 true \
    --bf16 \
    --per_device_train_batch_size 1 \
    --num_train_epochs 1 \
    --logging_steps 10 \
    --output_dir out

# 3. Actual training run, reusing the cached graphs
torchrun --nproc_per_node=$PROCESSES_PER_NODE train.py \
    --model_id $MODEL_ID \
    --dataset_path $DATASET_PATH \
    --tensor_parallel_size 8 \
    --zero_1 true \
    --bf16 \
    --per_device_train_batch_size 1 \
    --num_train_epochs 1 \
    --logging_steps 10 \
    --output_dir out

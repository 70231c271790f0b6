#!/usr/bin/env bash
# sglang 0.5.23 launch commands for system h20-pool x 1 unit(s) of scenario 'plan-offload', written by kvsim.
# Usage: ./sglang.sh GROUP [extra engine flags]   (run once per instance of the group,
# each on its own cards, e.g. with CUDA_VISIBLE_DEVICES). README.md says where each value came from.
set -euo pipefail

# main: mixed, 4 instance(s) of 2 card(s) each on h20-8x nodes (8 cards per node)
launch_main() {
  export MOONCAKE_MASTER=kv-pool:50051
  export MOONCAKE_PROTOCOL=rdma
  export MOONCAKE_GLOBAL_SEGMENT_SIZE=0
  exec python3 -m sglang.launch_server \
    --model-path Qwen/Qwen3-8B \
    --tp-size 2 \
    --max-running-requests 256 \
    --chunked-prefill-size 2048 \
    --page-size 16 \
    --mem-fraction-static 0.9 \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --radix-eviction-policy lru \
    --enable-hierarchical-cache \
    --hicache-write-policy write_through \
    --hicache-storage-backend mooncake \
    "$@"
}

case "${1:-}" in
  main) shift; launch_main "$@" ;;
  *) echo "usage: $0 {main} [extra flags]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# vllm 0.33.0 launch commands for system h20-pool x 1 unit(s) of scenario 'plan-offload', written by kvsim.
# Usage: ./vllm.sh GROUP [extra engine flags]   (run once per instance of the group,
# each on its own cards, e.g. with CUDA_VISIBLE_DEVICES). README.md says where each value came from.
set -euo pipefail

# main: mixed, 4 instance(s) of 2 card(s) each on h20-8x nodes (8 cards per node)
launch_main() {
  export LMCACHE_CHUNK_SIZE=256
  export LMCACHE_LOCAL_CPU=False
  export LMCACHE_REMOTE_URL=mooncakestore://kv-pool:50051/
  exec vllm serve Qwen/Qwen3-8B \
    --tensor-parallel-size 2 \
    --max-num-seqs 256 \
    --max-num-batched-tokens 2048 \
    --block-size 16 \
    --gpu-memory-utilization 0.9 \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --enable-prefix-caching \
    --kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}' \
    "$@"
}

case "${1:-}" in
  main) shift; launch_main "$@" ;;
  *) echo "usage: $0 {main} [extra flags]" >&2; exit 2 ;;
esac

"""Mixture plans, sequence packing (Algorithm 18.2), Megatron shards and the resumable shard reader."""

"""mixtures_packing: mixture_plan and packed_shards (logic: corpus_assets/domain/pack)."""

"""Data: text from a corpus to every worker's token batches (sources, tokenizers,
the embedded Shakespeare builder, packing and worker shards, the validation
split, the Grain input pipeline). Imports nothing else of the package."""

"""Training data: reading text files, and the corpora a run batches from.

    reader.py     one reader for every text file mixcse takes in (plain, .gz, JSON lines; strict UTF-8)
    documents.py  training files: sentences, passages, CSV/JSONL/Parquet columns, positives, dedupe, statistics
    memory.py     the in-memory corpus (``corpus: memory``) and ``pad_batch``
    disk.py       the on-disk corpus (``corpus: disk``): tokenised shards, for corpora larger than RAM
    loader.py     ``CorpusLoader`` (which corpus a config asks for) and ``BatchPlan`` (the seeded batch order)

May import ``mixcse.utils`` and ``mixcse.errors``; never the model, evaluation or training.
"""

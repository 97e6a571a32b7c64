"""Small helpers every stage uses: files (atomic writes, JSON), tables (numbers, markdown) and progress.

May import only the standard library, numpy, tqdm and ``mixcse.errors``.
"""

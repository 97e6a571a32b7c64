"""Small helpers every stage uses: files (atomic writes, JSON), tables (task order, labels, markdown) and progress.

May import only the standard library, numpy, tqdm and ``mixcse.errors``.
"""

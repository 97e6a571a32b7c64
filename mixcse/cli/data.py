"""``mixcse data download``: the SentEval benchmark files and wiki1m, checksums verified (mixcse/data/download.py)."""
from __future__ import annotations

import argparse

from mixcse.utils.files import cache_home


def add_data_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("action", choices=("download",), help="download: fetch and verify the benchmark data")
    parser.add_argument("--dest", default=None,
                        help=f"target folder: DEST/downstream/... and DEST/wiki1m_for_simcse.txt (default "
                             f"{cache_home() / 'data'}, where mixcse eval and training look for them)")
    parser.add_argument("--what", default="senteval,wiki1m", help="comma-separated: senteval, wiki1m")
    parser.add_argument("--base-url", default=None,
                        help="where senteval.tar and wiki1m_for_simcse.txt live (default $MIXCSE_DATA_URL, then the "
                             "SimCSE authors' dataset repository)")
    return parser


def run_data(args: argparse.Namespace) -> int:
    from mixcse.data.download import download

    report = download(args.dest, what=args.what.split(","), base_url=args.base_url)  # errors: mixcse.cli.main
    for item, rep in report.items():
        print(f"{item}: {rep['status']} -> {rep['path']}")
    return 0


"""Generate the Python gRPC stubs of proto/cascade/v1 into services/common/pb.

`python -m services.common.protogen` regenerates the committed stubs; the test suite calls
`generate(tmpdir)` and compares, so stubs that drift from the protos fail CI. Generated files are
never edited by hand: protoc's absolute imports (`from cascade.v1 import x_pb2`) are rewritten to
the package they live in, which is the only change made to protoc's output.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PROTO_DIR = PROTO_ROOT / "cascade" / "v1"
PB_DIR = Path(__file__).resolve().parent / "pb"
PB_PACKAGE = "services.common.pb"
_IMPORT = re.compile(r"^from cascade\.v1 import (\w+_pb2)", re.MULTILINE)
_INIT = '"""Generated gRPC stubs of proto/cascade/v1 (python -m services.common.protogen). Do not edit."""\n'


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (grpcio-tools) over every proto and write rewritten stubs to `out_dir`."""
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as raw:
        include = Path(protoc.__file__).resolve().parent / "_proto"
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            *[str(p) for p in proto_files()],
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on proto/cascade/v1")
        written = []
        for src in sorted((Path(raw) / "cascade" / "v1").iterdir()):
            text = _IMPORT.sub(rf"from {PB_PACKAGE} import \1", src.read_text())
            dst = out_dir / src.name
            dst.write_text(text)
            written.append(dst)
    (out_dir / "__init__.py").write_text(_INIT)
    return written + [out_dir / "__init__.py"]


def main() -> None:
    if PB_DIR.exists():
        shutil.rmtree(PB_DIR)
    files = generate(PB_DIR)
    print(f"wrote {len(files)} files to {PB_DIR.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()

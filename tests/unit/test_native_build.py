"""commtrace.native: extensions are discovered from their declarations, and a
build that fails says why in one line and leaves nothing behind (commtrace then
stays on its Python paths)."""
from __future__ import annotations

import os
import shutil

import pytest

from commtrace import native
from commtrace.capture import native_ext, native_wrapper

needs_cxx = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++").split()[0]) is None,
                               reason="no C++ compiler")


def test_declared_extensions_are_discovered():
    found = dict(native.extensions())
    assert found["native wrapper"] is native_ext.EXTENSION is native_wrapper.EXTENSION
    assert "mpi fast path" in found  # an Extension, or None where mpi4py's MPI has no headers
    assert found["mpi fast path"] is None or found["mpi fast path"].name == "mpi_fastpath"


def test_build_key_follows_headers(tmp_path, monkeypatch):
    """A header next to the sources is part of the key: editing it means a new build."""
    monkeypatch.setenv("COMMTRACE_NATIVE_DIR", str(tmp_path / "builds"))
    (tmp_path / "m.cpp").write_text('#include "m.h"\n')
    (tmp_path / "m.h").write_text("// one\n")
    ext = native.Extension("keyed", (str(tmp_path / "m.cpp"),))
    first = native._paths(ext)
    (tmp_path / "m.h").write_text("// two\n")
    native._paths.cache_clear()  # a process keys each extension once
    second = native._paths(ext)
    assert first[0].startswith("keyed_") and second[0].startswith("keyed_") and first[0] != second[0]
    assert second[1] == str(tmp_path / "builds" / (second[0] + ".so"))


@needs_cxx
def test_failed_build_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    builds = tmp_path / "builds"
    monkeypatch.setenv("COMMTRACE_NATIVE_DIR", str(builds))
    src = tmp_path / "broken.cpp"
    src.write_text("int f( { return 1; }\n")
    ext = native.Extension("broken", (str(src),))  # an absolute source path stays as it is
    monkeypatch.delenv("CXX", raising=False)
    path = os.environ["PATH"]
    with pytest.raises(native.NativeBuildError) as e:
        native.build(ext)
    assert (os.environ["PATH"], os.environ.get("CXX")) == (path, None)   # set for cpp_extension, then restored
    assert str(e.value).startswith("compiling broken failed: ") and "\n" not in str(e.value)
    assert "error" in str(e.value)
    assert os.listdir(builds) == []  # no .so, no work folder
    monkeypatch.setenv("COMMTRACE_NATIVE", "build")
    assert native.load(ext) is None
    assert native.error(ext).startswith("NativeBuildError: compiling broken failed")

"""The documentation config: licence boilerplate dropped, technical prose with code kept."""

from __future__ import annotations

from quality.base import Doc
from quality.chain import FilterChain
from quality.config import load_config
from quality.doc_filters import LicenseText

MIT = (
    "Copyright (c) 2020 The Authors\n\nPermission is hereby granted, free of charge, to any person obtaining a copy "
    "of this software, to deal in the Software without restriction. THE SOFTWARE IS PROVIDED AS IS, WITHOUT "
    "WARRANTY OF ANY KIND, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY. IN NO EVENT SHALL THE "
    "AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM.\n"
)
GUIDE = (
    "# Building the library\n\n"
    "The build system is non-recursive. Each subdirectory has a Makemodule.am file, and automake merges "
    "these files into one Makefile in the top-level directory. Run the configure script first, then make.\n\n"
    "    ./configure --prefix=/usr/local --enable-shared\n    make -j4 && make check\n\n"
    "Options are stored in the $enable_<name> variable, which the configure script sets to yes or no. "
    "A feature that needs an optional dependency is disabled when the dependency is missing, and the summary "
    "at the end of the configure run lists what was found. The tests run from the build tree, so nothing "
    "has to be installed before `make check`. If a test fails, its log is kept in tests/diff/ with the "
    "expected and the actual output side by side, which is usually enough to see what went wrong. "
    "The library is licensed under the LGPL; see COPYING.\n\n"
    "    if (fd < 0) {\n        return -errno;\n    }\n\n"
    "Release builds strip debug symbols. Set CFLAGS=-g -O0 when you need to step through the code in a "
    "debugger, and run the binary from the build tree with libtool --mode=execute gdb so the uninstalled "
    "library is the one that gets loaded. The documentation is built with make docs into the doc/ folder.\n"
)


def test_license_text_drops_licences_and_keeps_a_readme_that_names_one():
    assert LicenseText().filter(Doc("mit", MIT)).reason == "license_text"
    assert LicenseText().filter(Doc("guide", GUIDE)).keep


def test_docs_config_keeps_technical_prose_that_text_drops():
    doc = Doc("guide", GUIDE, "text", "en")
    assert FilterChain(load_config("docs")).apply(doc).keep
    assert not FilterChain(load_config("text")).apply(doc).keep
    assert not FilterChain(load_config("docs")).apply(Doc("mit", MIT * 5, "text", "en")).keep

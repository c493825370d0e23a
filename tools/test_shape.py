"""Unit tests of tools/shape.py: its path resolver on small crates written
to a temporary directory (a `mod.rs`, a leaf file, a directory module
without mod.rs, inline modules), its cycle and floor counts, and its exit
status on a workspace with a cycle or a long function.

  python3 tools/shape.py --self-test     (or python3 -m unittest tools/test_shape.py)
"""
import io
import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shape  # noqa: E402


def write_crate(root, files, crate="demo"):
    """Writes files ({path under src: text}) as crates/<crate>/src/."""
    src = os.path.join(root, "crates", crate, "src")
    for rel, text in files.items():
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
    return src


def edges_of(files):
    with tempfile.TemporaryDirectory() as root:
        write_crate(root, files)
        edges = shape.crates_of(root)["demo"]
    return {shape.name(m): sorted(shape.name(t) for t in ts) for m, ts in edges.items()}


class Resolver(unittest.TestCase):
    def test_super_in_a_leaf_file_is_its_directory_module(self):
        # The bug of issue 32: in client/bulk.rs, `super::ops` is client::ops.
        edges = edges_of({
            "lib.rs": "mod client;\nmod ops;\n",
            "ops.rs": "",
            "client/mod.rs": "mod bulk;\nmod ops;\n",
            "client/ops.rs": "",
            "client/bulk.rs": "use super::ops::Op;\n",
        })
        self.assertEqual(edges["client::bulk"], ["client::ops"])

    def test_super_in_a_mod_rs_is_the_parent_directory(self):
        edges = edges_of({
            "lib.rs": "mod client;\nmod wire;\n",
            "wire.rs": "",
            "client/mod.rs": "use super::wire::Frame;\n",
        })
        self.assertEqual(edges["client"], ["wire"])

    def test_self_in_a_leaf_file_names_its_own_children(self):
        # service.rs with service/put.rs: `self::put` is service::put, a
        # child, not the sibling `put` beside service.rs.
        edges = edges_of({
            "lib.rs": "mod put;\nmod service;\n",
            "put.rs": "",
            "service.rs": "mod put;\nuse self::put::Begin;\n",
            "service/put.rs": "",
        })
        self.assertEqual(edges["service"], ["service::put"])

    def test_super_super_climbs_two_levels(self):
        edges = edges_of({
            "lib.rs": "mod a;\nmod top;\n",
            "top.rs": "",
            "a/mod.rs": "mod b;\n",
            "a/b/mod.rs": "mod c;\n",
            "a/b/c.rs": "fn f() { super::super::super::top::go(); }\n",
        })
        self.assertEqual(edges["a::b::c"], ["top"])

    def test_inline_module_resolves_super_to_its_file(self):
        # Inside `mod inner { }` of x.rs, `super::` is x itself, and
        # `super::super::y` the sibling y.
        edges = edges_of({
            "lib.rs": "mod x;\nmod y;\nmod z;\n",
            "x.rs": "mod inner {\n    use super::super::y::Y;\n    use super::Local;\n}\nuse crate::z;\n",
            "y.rs": "",
            "z.rs": "",
        })
        self.assertEqual(edges["x"], ["y", "z"])

    def test_grouped_use_trees_and_self_in_braces(self):
        edges = edges_of({
            "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\n",
            "a.rs": "use crate::{b::{self, B}, c::C as Renamed};\nuse super::d::*;\n",
            "b.rs": "", "c.rs": "", "d.rs": "",
        })
        self.assertEqual(edges["a"], ["b", "c", "d"])

    def test_comments_strings_and_visibility_are_not_uses(self):
        edges = edges_of({
            "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\n",
            "a.rs": '//! See [`crate::b`].\n// crate::c::x\nconst S: &str = "crate::d";\npub(in crate::b) fn f() {}\n',
            "b.rs": "", "c.rs": "", "d.rs": "",
        })
        self.assertEqual(edges["a"], [])

    def test_an_item_path_lands_in_the_file_that_holds_it(self):
        edges = edges_of({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "fn f() -> crate::b::Thing { crate::b::Thing::new() }\n",
            "b.rs": "",
        })
        self.assertEqual(edges["a"], ["b"])


class Graph(unittest.TestCase):
    def test_parent_and_child_are_not_a_cycle_but_siblings_are(self):
        with tempfile.TemporaryDirectory() as root:
            write_crate(root, {
                "lib.rs": "mod client;\n",
                "client/mod.rs": "mod bulk;\nmod ops;\npub use bulk::Bulk;\n",
                "client/bulk.rs": "use super::ops::Op;\nuse super::Client;\n",
                "client/ops.rs": "use super::bulk::Progress;\n",
            })
            edges = shape.crates_of(root)["demo"]
        self.assertEqual(shape.cycles(edges), [["client::bulk", "client::ops"]])

    def test_floors_count_the_longest_chain(self):
        with tempfile.TemporaryDirectory() as root:
            write_crate(root, {
                "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\n",
                "a.rs": "use crate::b::B;\nuse crate::d::D;\n",
                "b.rs": "use crate::c::C;\n",
                "c.rs": "", "d.rs": "",
            })
            edges = shape.crates_of(root)["demo"]
        self.assertEqual(shape.floors(edges), (3, ["a", "b", "c"]))


class ExitStatus(unittest.TestCase):
    LONG = "fn long() {\n" + "    let _ = 1;\n" * 70 + "}\n"

    def run_on(self, files, *flags):
        with tempfile.TemporaryDirectory() as root:
            write_crate(root, files)
            out = io.StringIO()
            status = shape.report(root, 60, "--allow-long" in flags, out)
        return status, out.getvalue()

    def test_a_clean_crate_passes(self):
        status, out = self.run_on({"lib.rs": "mod a;\n", "a.rs": "fn short() {}\n"})
        self.assertEqual(status, 0, out)

    def test_a_cycle_fails_even_with_allow_long(self):
        status, out = self.run_on({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use super::b::B;\n",
            "b.rs": "use super::a::A;\n",
        }, "--allow-long")
        self.assertEqual(status, 1)
        self.assertIn("demo: a <-> b", out)

    def test_a_long_function_fails_unless_allowed(self):
        files = {"lib.rs": "mod a;\n", "a.rs": self.LONG}
        status, out = self.run_on(files)
        self.assertEqual(status, 1)
        self.assertIn("a.rs:1 long", out)
        self.assertEqual(self.run_on(files, "--allow-long")[0], 0)

    def test_a_long_test_function_is_not_counted(self):
        status, out = self.run_on({"lib.rs": "#[cfg(test)]\nmod tests {\n" + self.LONG + "}\n"})
        self.assertEqual(status, 0, out)


if __name__ == "__main__":
    unittest.main()

"""cts_realm.py's realm and figures without a realm: the names look like a
directory's (every length of 2-40, dotted, some with instances, distinct,
the same for the same seed), the uniform ones have one length, the
address-sending krb5.conf, and the figures read from counters and shape
files. Well under a second."""
import os

from bench import cts_realm


def test_directory_names():
    names = cts_realm.directory_names(2000)
    assert len(set(names)) == 2000
    lengths = {len(n) for n in names}
    assert lengths == set(range(2, 41)), sorted(lengths)
    assert sum("." in n for n in names) > 1600
    assert 100 < sum("/" in n for n in names) < 400
    assert all(".." not in n and "./" not in n and not n.endswith(".") for n in names)
    assert names == cts_realm.directory_names(2000)
    assert names[:50] != cts_realm.directory_names(2000, seed=1)[:50]
    # A small realm still spans the lengths.
    small = cts_realm.directory_names(40)
    assert min(map(len, small)) == 2 and max(map(len, small)) == 40


def test_uniform_names():
    names = cts_realm.uniform_names(2000)
    assert len(set(names)) == 2000 and {len(n) for n in names} == {6}


def test_with_addresses(tmp_path):
    src = tmp_path / "krb5.conf"
    src.write_text("[libdefaults]\n    default_realm = KMPC.TEST\n[realms]\n")
    out = cts_realm.with_addresses(str(src), str(tmp_path / "addr.conf"))
    text = open(out).read()
    assert text.startswith("[libdefaults]\n    noaddresses = false\n"
                           "    extra_addresses = 192.0.2.17, 198.51.100.4\n")
    assert "default_realm = KMPC.TEST" in text


def test_population_groups(tmp_path):
    class R:
        dir = str(tmp_path)
    pop = cts_realm.Population(R, "varied", cts_realm.directory_names(100))
    assert len(pop.groups["addr"]) == 25 and len(pop.groups["plain"]) == 75
    assert not set(pop.groups["addr"]) & set(pop.groups["plain"])
    assert pop.keytabs["addr"] == os.path.join(str(tmp_path), "varied-addr.keytab")
    assert pop.lengths() == (2, 40)


def test_shape_figures_and_runs():
    before = [[["2", "14", "44", "0", "0", "0", "0"]]] * 3
    new = [["1", "14", "300", "0", "0", "120", "40"], ["1", "14", "316", "0", "0", "136", "40"],
           ["1", "14", "300", "0", "0", "120", "40"], ["3", "0", "180", "0", "0", "0", "0"]]
    after = [before[0] + new] * 3
    f = cts_realm.shape_figures(before, after)
    assert f["compiles_recorded"] == [4, 4, 4]
    assert f["distinct_shapes"] == [3, 3, 3]
    assert f["distinct_shapes_by_kind"] == {"encrypt": 2, "checksum": 1}
    assert f["distinct_reply_lengths"] == 2 and f["distinct_request_lengths"] == 2
    assert f["distinct_shapes_ever"] == 4
    c0 = {("kmpc_kdc_exchange_runs_total", "as", "ok"): 5.0,
          ("kmpc_kdc_exchanges_total", "as", "ok"): 5.0}
    c1 = {("kmpc_kdc_exchange_runs_total", "as", "ok"): 9.0,
          ("kmpc_kdc_exchange_runs_total", "as", "failed"): 7.0,
          ("kmpc_kdc_exchanges_total", "as", "ok"): 9.0}
    assert cts_realm.all_runs(c0, c1) == 11
    assert cts_realm.all_runs(None, c1) is None
    s0 = {"cts": [{"kmpc_cts_program_cache_total:miss": 2.0}] * 3}
    s1 = {"cts": [{"kmpc_cts_program_cache_total:miss": 40.0,
                   "kmpc_cts_program_cache_total:hit": 9.0}] * 3}
    assert cts_realm.cache_misses(s0, s1) == {"miss": [38] * 3, "hit": [9] * 3}

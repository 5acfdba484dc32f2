import sys, time
from test_private_signing import _realm, _login, _runs, SERVICE, CLIENT, PASSWORD
from test_metrics import parse, scrape

def test_dbg(kmpc_factory, tmp_path):
    r = kmpc_factory(module="real", metrics=True)
    r.setup_krbtgt(); r.setup_warmup(); r.add_users({CLIENT: PASSWORD}); r.add_service(SERVICE); r.start()
    for _ in range(2):
        _login(r, "-f", "-r", "1d"); r.run(["kvno", SERVICE]); r.run(["kinit", "-R"])
    _login(r, "-f", "-r", "1d")
    time.sleep(1.1)
    r.run(["kvno", SERVICE])
    for name, argv in (("renewal", ["kinit", "-R"]), ("TGS2", ["kvno", SERVICE])):
        m0 = parse(scrape(r.kdc_metrics_url))
        b = _runs(r); r.run(argv); print(name, "runs", _runs(r) - b)
        m1 = parse(scrape(r.kdc_metrics_url))
        for k in sorted(m1, key=str):
            if "bucket" in k[0] or "exposer" in k[0] or "seconds" in k[0] or "malloc" in k[0] or "process" in k[0]: continue
            d = m1[k] - m0.get(k, 0)
            if d: print("D", k[0], dict(k[1]), d)
    assert False

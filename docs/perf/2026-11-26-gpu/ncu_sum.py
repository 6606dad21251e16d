import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; ki, mi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[mi].replace(",", "")); v *= {"ns": 1e-6, "nsecond": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1, "ms": 1}.get(r[ui], 1)
    k = r[ki].split("(")[0][:70]; t[k] += v; n[k] += 1
tot = sum(t.values())
print("total %.2f ms over %d kernels" % (tot, sum(n.values())))
for k, v in sorted(t.items(), key=lambda x: -x[1])[:40]:
    print("%9.3f ms %5.1f%% %5d  %s" % (v, 100 * v / tot, n[k], k))

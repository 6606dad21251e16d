import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    f = l.split(); v, a, b = f[0], float(f[1]), float(f[2])
    k = 'near' if a < 200 and b < 200 else 'far' if a > 250 and b > 250 else None
    if not k: continue
    for x in f[3:]:
        s, o, i = x.split(':'); d.setdefault((int(s), k), {}).setdefault(v, ([], []))
        d[(int(s), k)][v][0].append(float(o)); d[(int(s), k)][v][1].append(float(i) if i != "N/A" else 0.0)
vs = sorted({v for s in d for v in d[s]}, key=lambda v: v != 'base')
print("size place", *["%s(out/in/n)" % v for v in vs])
for s in sorted(d):
    row = []
    for v in vs:
        o, i = d[s].get(v, ([0], [0])); row.append("%.0f/%.0f/%d" % (st.median(o), st.median(i), len(o)))
    print(s[0], s[1], *row)

import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    f = l.split(); v, a, b = f[0], float(f[1]), float(f[2])
    if not (a < 200 and b < 200): continue
    for x in f[3:]:
        s, o, i = x.split(':'); d.setdefault(int(s), {}).setdefault(v, ([], []))
        d[int(s)][v][0].append(float(o)); d[int(s)][v][1].append(float(i))
vs = sorted({v for s in d for v in d[s]}, key=lambda v: v != 'base')
print("size", *["%s(out,in,n)" % v for v in vs])
for s in sorted(d):
    row = []
    for v in vs:
        o, i = d[s].get(v, ([0], [0])); row.append("%.0f/%.0f/%d" % (st.median(o), st.median(i), len(o)))
    print(s, *row)

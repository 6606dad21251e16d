# usage: sum.py FILE: medians per variant and size (us, out of place / in place), and
# each weft variant's ratio to Open MPI (Open MPI's time / weft's: above 1 weft is faster)
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    if l.startswith('#'):
        continue
    f = l.split()
    if len(f) < 14:
        continue
    d[(f[0], int(f[1]), 'oop')].append(float(f[6]))
    d[(f[0], int(f[1]), 'ip')].append(float(f[10]))
whos = [w for w in ('near', 'auto', 'cma', 'ompi') if any(k[0] == w for k in d)]
sizes = sorted({k[1] for k in d})
print("| size | " + " | ".join(w + " us" for w in whos) + " | " +
      " | ".join(w + "/ompi" for w in whos if w != 'ompi') + " |")
print("|---:" * (1 + 2 * len(whos) - 1) + "|")
for s in sizes:
    med = {w: (st.median(d[(w, s, 'oop')]), st.median(d[(w, s, 'ip')])) for w in whos}
    om = med['ompi']
    cells = ["%.1f / %.1f" % med[w] for w in whos]
    ratios = ["%.2fx / %.2fx" % (om[0] / med[w][0], om[1] / med[w][1]) for w in whos if w != 'ompi']
    n = len(d[(whos[0], s, 'oop')])
    print("| %s | %s | %s |" % (s, " | ".join(cells), " | ".join(ratios)))

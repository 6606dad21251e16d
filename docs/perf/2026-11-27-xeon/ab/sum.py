import sys, statistics as st, collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    if l.startswith('#'): continue
    f=l.split()
    if len(f)<10: continue
    who=f[0]; size=int(f[1])
    # columns: who size count type op root time algbw busbw wrong time algbw busbw wrong
    d[(who,size,'oop')].append(float(f[6])); d[(who,size,'ip')].append(float(f[10]))
sizes=sorted({k[1] for k in d})
whos=['default','cma','ompi']
print("%9s | %s"%("size"," | ".join("%-22s"%(w+" oop/ip") for w in whos)))
for s in sizes:
    row=[]
    for w in whos:
        o=d.get((w,s,'oop')); i=d.get((w,s,'ip'))
        row.append("%9.1f / %9.1f"%(st.median(o),st.median(i)) if o else "-")
    o0=st.median(d[('default',s,'oop')]); i0=st.median(d[('default',s,'ip')])
    oc=st.median(d[('cma',s,'oop')]); ic=st.median(d[('cma',s,'ip')])
    om=st.median(d[('ompi',s,'oop')]); im=st.median(d[('ompi',s,'ip')])
    print("%9d | %s | def/ompi %.2fx/%.2fx cma/ompi %.2fx/%.2fx"%(s," | ".join(row),om/o0,im/i0,om/oc,im/ic))

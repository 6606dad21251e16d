/* all-reduce in place of a buffer the caller has just written (a gradient): median us */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "weft.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  weft_comm_t*c; if(weft_comm_init(&c)) return 1;
  int rank=weft_comm_rank(c);
  size_t maxb=64u<<20; float*buf=malloc(maxb); float*out=malloc(maxb);
  int oop = argc>1 && !strcmp(argv[1],"oop");
  for(size_t b=128u<<10;b<=maxb;b*=2){
    size_t n=b/4; double t[30];
    for(int it=0;it<35;it++){
      for(size_t i=0;i<n;i++) buf[i]=(float)(i&255)+rank+it;   /* freshly written */
      weft_barrier(c);
      double t0=now();
      weft_allreduce(buf,oop?out:buf,n,WEFT_FLOAT32,WEFT_SUM,c);
      double dt=now()-t0;
      weft_allreduce(&dt,&dt,1,WEFT_FLOAT64,WEFT_MAX,c);
      if(it>=5) t[it-5]=dt;
    }
    qsort(t,30,sizeof(double),cmp);
    if(rank==0) printf("%10zu %9.1f\n",b,t[15]*1e6);
  }
  weft_comm_destroy(c); return 0;
}

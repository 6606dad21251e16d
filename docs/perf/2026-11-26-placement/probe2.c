#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
#define BIG (64u<<20)
#define FR (128u<<10)
struct ctl { volatile uint64_t flag[8]; volatile uint64_t head[8]; volatile uint64_t tail[8]; volatile uint64_t head2[8]; volatile uint64_t tail2[8]; volatile uint64_t bar[16]; double res[8]; };
static struct ctl *c; static int me; static uint64_t barn;
static void barrier(void){ barn++; c->bar[me*8]=barn; while(c->bar[(1-me)*8]<barn); }
static void ntcopy(void *d, const void *s, size_t n){ __m256i *dd=d; const __m256i *ss=s; for(size_t i=0;i<n/32;i+=4){ __m256i a=_mm256_loadu_si256(ss+i),b=_mm256_loadu_si256(ss+i+1),x=_mm256_loadu_si256(ss+i+2),y=_mm256_loadu_si256(ss+i+3); _mm256_stream_si256(dd+i,a);_mm256_stream_si256(dd+i+1,b);_mm256_stream_si256(dd+i+2,x);_mm256_stream_si256(dd+i+3,y);} _mm_sfence(); }
static char *ring, *ring2, *src; static char *a,*b;
/* one direction: 0 -> 1 */
static double uni(int nslot, int nt, size_t fr){
  barrier(); if(me==0){c->head[0]=0;} else c->tail[0]=0; barrier();
  double t0=now(); uint64_t n=(uint64_t)BIG/fr;
  for(uint64_t i=0;i<n;i++){ size_t off=i*fr;
    if(me==0){ while(i - c->tail[0]>=(uint64_t)nslot); char*d=ring+(i%nslot)*fr; if(nt) ntcopy(d,a+off,fr); else memcpy(d,a+off,fr); __atomic_store_n(&c->head[0],i+1,__ATOMIC_RELEASE);}
    else { while(__atomic_load_n(&c->head[0],__ATOMIC_ACQUIRE)<=i); memcpy(b+off,ring+(i%nslot)*fr,fr); __atomic_store_n(&c->tail[0],i+1,__ATOMIC_RELEASE);} }
  barrier(); return (now()-t0)*1e6; }
/* both directions, interleaved like sendrecv */
static double bi(int nslot, size_t fr){
  barrier(); c->head[0]=c->tail[0]=c->head2[0]=c->tail2[0]=0; barrier();
  volatile uint64_t *oh = me? c->head2: c->head, *ot = me? c->tail2: c->tail, *ih = me? c->head: c->head2, *it = me? c->tail: c->tail2;
  char *orr = me? ring2: ring, *ir = me? ring: ring2;
  double t0=now(); uint64_t n=(uint64_t)BIG/fr, s=0, r=0;
  while(s<n||r<n){
    if(s<n && s - *ot < (uint64_t)nslot){ memcpy(orr+(s%nslot)*fr,a+s*fr,fr); s++; __atomic_store_n(oh,s,__ATOMIC_RELEASE);} 
    if(r<n && __atomic_load_n(ih,__ATOMIC_ACQUIRE)>r){ memcpy(b+r*fr,ir+(r%nslot)*fr,fr); r++; __atomic_store_n(it,r,__ATOMIC_RELEASE);} }
  barrier(); return (now()-t0)*1e6; }
/* single copy: 1 reads 0's (clean) source */
static double direct(void){ barrier(); double t0=now(); if(me==1) memcpy(b,src,BIG); barrier(); return (now()-t0)*1e6; }
static double pp(void){ barrier(); int N=20000; double t0=now();
  for(int i=0;i<N;i++){ if(me==0){ c->flag[0]=2*i+1; while(c->flag[0]!=2*i+2); } else { while(c->flag[0]!=2*i+1); c->flag[0]=2*i+2; } }
  double r=(now()-t0)/N*1e9; barrier(); c->flag[0]=0; barrier(); return r; }
int main(int argc,char**argv){
  int secs=argc>1?atoi(argv[1]):60;
  c = mmap(0,sizeof *c,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  ring = mmap(0,16u<<20,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0); memset(ring,0,16u<<20);
  ring2 = mmap(0,16u<<20,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0); memset(ring2,0,16u<<20);
  src = mmap(0,BIG,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0); memset(src,3,BIG);
  pid_t p = fork(); me = p==0; pin(me);
  a = malloc(BIG); b = malloc(BIG); memset(a,1,BIG); memset(b,2,BIG);
  double tend=now()+secs;
  if(!me) printf("# pp(ns) uni32x128K uni32x128K-nt uni4x128K uni128x128K uni512x32K bi32x128K direct (us per 64MB)\n");
  while(1){ int stop = now()>tend; c->res[7]=stop; barrier(); if(c->res[7]) break;
    double r[8]; r[0]=pp(); r[1]=uni(32,0,FR); r[2]=uni(32,1,FR); r[3]=uni(4,0,FR); r[4]=uni(128,0,FR); r[5]=uni(512,0,32u<<10); r[6]=bi(32,FR); r[7]=direct();
    if(!me){ printf("%.0f", r[0]); for(int k=1;k<8;k++) printf(" %.0f", r[k]); printf("\n"); fflush(stdout);} }
  if(me) _exit(0); wait(NULL); return 0; }

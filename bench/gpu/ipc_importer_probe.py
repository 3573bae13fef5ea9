#!/usr/bin/env python3
"""What NVML, /proc/PID/fd and /proc/PID/maps show for a CUDA IPC importer before and after
its exporter dies (issue 52; docs/orphans.md, "Keepers"). The CUDA driver API through ctypes
(libcuda.so.1, no toolkit), nvidia-smi for NVML's view. Run on the GPU machine as root:

  python3 bench/gpu/ipc_importer_probe.py

Ran as is on an H100 (driver 580.159.04): while both live, nvidia-smi lists the exporter with
4614 MiB and the importer with 518 MiB; the import adds no fd and no mapping to the importer;
after SIGKILL of the exporter, only the importer is listed, with 4614 MiB, until it exits.
Kept compact: it travelled to the device machine inline (gzip + base64 on the command line).
"""
import ctypes as C,json,os,subprocess as S,sys,time
class H(C.Structure):_fields_=[("b",C.c_char*64)]
def cu():
 l=C.CDLL("libcuda.so.1")
 def c(n,*a):
  r=getattr(l,n)(*a)
  if r:raise RuntimeError(f"{n}:{r}")
 c("cuInit",0);d=C.c_int();c("cuDeviceGet",C.byref(d),0);x=C.c_void_p();c("cuDevicePrimaryCtxRetain",C.byref(x),d);c("cuCtxSetCurrent",x);return c
def smi():
 a=S.run(["nvidia-smi","--query-compute-apps=pid,used_memory","--format=csv,noheader,nounits"],capture_output=True,text=True).stdout.split("\n")
 u=S.run(["nvidia-smi","--query-gpu=memory.used","--format=csv,noheader"],capture_output=True,text=True).stdout.strip()
 return [u]+[x for x in a if x]
def pv(p):
 o={}
 try:
  for f in os.listdir(f"/proc/{p}/fd"):
   t=os.readlink(f"/proc/{p}/fd/{f}")
   if "nvidia" in t:o[f]=t+" "+" ".join(open(f"/proc/{p}/fdinfo/{f}").read().split())
  m=[l.split()[0]+" "+l.split()[2]+" "+l.split()[-1] for l in open(f"/proc/{p}/maps") if "nvidia" in l]
 except OSError as e:return str(e)
 return {"fds":o,"maps":m}
a=sys.argv[1:]
if a and a[0]=="e":
 c=cu();p=C.c_ulonglong();c("cuMemAlloc_v2",C.byref(p),C.c_size_t(4<<30));c("cuMemsetD8_v2",p,C.c_ubyte(1),C.c_size_t(4<<30));h=H();c("cuIpcGetMemHandle",C.byref(h),p);print(bytes(h).hex(),flush=True);time.sleep(999)
if a and a[0]=="i":
 c=cu();print("ctx",flush=True);h=H.from_buffer_copy(bytes.fromhex(sys.stdin.readline().strip()));p=C.c_ulonglong();c("cuIpcOpenMemHandle_v2",C.byref(p),h,C.c_uint(1));print("ok",flush=True);time.sleep(999)
P=lambda *x:print(*x,flush=True)
e=S.Popen([sys.executable,__file__,"e"],stdout=S.PIPE,text=True);h=e.stdout.readline()
i=S.Popen([sys.executable,__file__,"i"],stdout=S.PIPE,stdin=S.PIPE,text=True,start_new_session=True);i.stdout.readline()
P("exp",e.pid,"imp",i.pid);b=pv(i.pid);P("smi ctx",smi())
i.stdin.write(h);i.stdin.flush();P(i.stdout.readline())
n=pv(i.pid);P("smi both",smi());P("imp fds",json.dumps(n["fds"]));P("imp new maps",[x for x in n["maps"] if x not in b["maps"]]);P("exp",json.dumps(pv(e.pid)))
e.kill();e.wait();time.sleep(3);P("smi exp dead",smi());n2=pv(i.pid);P("imp maps same",n2==n)
i.kill();i.wait();time.sleep(2);P("smi end",smi())

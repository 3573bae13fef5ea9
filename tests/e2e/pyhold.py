# A GPU holder for the simulated node that stays in its caller's process group and
# session, as a plain `python serve.py` does (`gpureap-sim hold` leads its own group):
# it opens nvidiactl, nvidia-uvm and the GPU's node, maps it, and registers its
# allocation the way the simulator's holders do (an allocation record, an OFD lock, a
# process record), so that `gpureap-sim cleanup` finds it. The shapes of
# defects-wave3 (launcher scripts, pipelines, login shells) need exactly this.
# usage: python3 pyhold.py GPU GIB PIDFILE
import os, sys, json, mmap, time, fcntl, struct, signal
D = os.environ['GPUREAP_SIM_DIR']
gpu = int(sys.argv[1]); nbytes = int(float(sys.argv[2]) * (1 << 30))
minor = json.load(open(D + '/node.json'))['gpus'][gpu]['minor']
keep = [os.open(D + '/dev/nvidiactl', os.O_RDWR), os.open(D + '/dev/nvidia-uvm', os.O_RDWR)]
g = os.open(D + '/dev/nvidia%d' % minor, os.O_RDWR); keep.append(g); m = mmap.mmap(g, 4096)
pid = int(os.readlink('/proc/self'))
st = open('/proc/self/stat').read(); start = int(st[st.rfind(')') + 2:].split()[19])
comm = open('/proc/self/comm').read().strip(); name = 'g%d-%d-%d' % (gpu, pid, start)
lk = os.open(D + '/allocs/' + name + '.lock', os.O_RDWR | os.O_CREAT, 0o644); keep.append(lk)
try: fcntl.fcntl(lk, 37, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))  # F_OFD_SETLK
except OSError: pass
def put(path, obj):
    with open(path + '.tmp', 'w') as fh: fh.write(json.dumps(obj) + '\n')
    os.rename(path + '.tmp', path)
put(D + '/procs/%d-%d.json' % (pid, start), {'pid': pid, 'start_time': start, 'role': 'holder',
    'pgid': os.getpgid(0), 'comm': comm, 'registered_ns': time.clock_gettime_ns(time.CLOCK_BOOTTIME)})
put(D + '/allocs/' + name + '.json', {'pid': pid, 'start_time': start, 'gpu': gpu, 'bytes': nbytes,
    'stuck': False, 'client': False, 'util': 0, 'ghost': False, 'ghost_reads': 0, 'release_delay_ns': 0,
    'comm': comm, 'pid_ns': os.stat('/proc/self/ns/pid').st_ino, 'gi': None, 'ci': 0})
with open(sys.argv[3] + '.tmp', 'w') as fh: fh.write('%d\n' % pid)
os.rename(sys.argv[3] + '.tmp', sys.argv[3])
while True: signal.pause()

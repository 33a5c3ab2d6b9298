# Samples a process's threads every 0.1 s (/proc/PID/task/*/stat) and prints, per thread
# class (the thread's name without its trailing number; "main" for the process's first
# thread), the CPU seconds used, the cores busy per STEP-second slice, and what each class
# waits in (state and kernel wait channel) when not running. Needs only Python 3 and
# Linux's /proc (no pack): any process on any host. Used by threadprofile.sh and
# coresduck.sh. Usage: python3 docs/device/threadsample.py PID [STEP]   (STEP default 0.5)
import os, re, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
pid = int(sys.argv[1]); step = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
hz = os.sysconf("SC_CLK_TCK"); base = f"/proc/{pid}/task"
waits = {}; last = {}; totals = {}; slices = []; start = time.time(); slice_start = start; acc = {}
while os.path.exists(base):
    now = time.time()
    try:
        tids = os.listdir(base)
    except OSError:
        break
    for tid in tids:
        try:
            st = open(f"{base}/{tid}/stat").read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        ticks = int(f[11]) + int(f[12])
        cls = "main" if tid == str(pid) else re.sub(r"[-]?\d+$", "", comm)
        d = ticks - last.get(tid, 0); last[tid] = ticks
        state = f[0]
        if state != "R":
            try:
                wchan = open(f"{base}/{tid}/wchan").read().strip() or "?"
            except OSError:
                wchan = "?"
            key = (cls, f"{state}:{wchan}")
        else:
            key = (cls, "R")
        waits[key] = waits.get(key, 0) + 1
        totals[cls] = totals.get(cls, 0) + d; acc[cls] = acc.get(cls, 0) + d
    if now - slice_start >= step:
        slices.append((slice_start - start, now - slice_start, acc)); acc = {}; slice_start = now
    time.sleep(0.1)
if acc:
    slices.append((slice_start - start, max(time.time() - slice_start, 0.1), acc))
classes = sorted(totals, key=lambda c: -totals[c])
print(f"wall ~{time.time() - start:.2f} s; thread class CPU s: " + ", ".join(f"{c} {totals[c] / hz:.2f}" for c in classes))
print("cores busy per slice: t " + " ".join(classes))
for t, dt, a in slices:
    print(f"  {t:5.1f} " + " ".join(f"{a.get(c, 0) / hz / dt:5.1f}" for c in classes) + f"  | {sum(a.values()) / hz / dt:5.1f}")
print("thread states per class (samples):")
for c in classes:
    ws = sorted(((n, w) for (k, w), n in waits.items() if k == c), reverse=True)[:5]
    print(f"  {c}: " + ", ".join(f"{w} {n}" for n, w in ws))

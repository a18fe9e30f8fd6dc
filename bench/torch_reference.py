"""PyTorch eager fp32 reference for bench/gpu_bench.sh: torchvision's
ResNet-18/50 (random weights; the time does not depend on them) on the
GPU, TF32 disabled so the comparison is fp32 against fp32. Prints one line
per model and batch: `torch MODEL BATCH MEDIAN_MS`.

Usage: python3 bench/torch_reference.py ITERS
"""
import sys
import torch
import torchvision

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")
print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}, fp32, TF32 off")
for name in ["resnet18", "resnet50"]:
    model = getattr(torchvision.models, name)(weights=None).eval().to(dev)
    for batch in [1, 32]:
        x = torch.randn(batch, 3, 224, 224, device=dev)
        times = []
        with torch.no_grad():
            for _ in range(5):
                model(x)
            torch.cuda.synchronize()
            for _ in range(iters):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                model(x)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
        times.sort()
        print(f"torch {name} {batch} {times[len(times) // 2]:.3f}")

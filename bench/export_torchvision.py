"""Exports torchvision architectures beyond ../shared/models as the zoo was
exported (PyTorch's TorchScript exporter, opset 17, seeded random weights),
at batch 8 (BATCH=N for another), each as OUTDIR/<name>/{model.onnx,input.npy,output.npy} with
onnxruntime's output as the oracle, for bench/check_models.sh and
bench/compare_ort.sh (EXTRA=OUTDIR). It also writes output_f64.npy, the
same network run by PyTorch in float64: the exact answer to within 1e-12,
which tells how far onnxruntime's own float32 output is from it.

BatchNorm statistics come from three random batches (cumulative average)
before the export, so activations keep a sane scale: with the default
statistics (mean 0, variance 1) ResNet-50's logits reach 1e2 and
Inception-v3's 1e12, EfficientNet-B0's vanish to 1e-14.

Setup once, beside the project (PyPI's torch wheel; ~6 GB with its CUDA
libraries, which the export does not use):
  python3 -m venv ../torch-venv && ../torch-venv/bin/pip install torch torchvision onnx onnxruntime
Usage:
  [BATCH=N] ../torch-venv/bin/python bench/export_torchvision.py OUTDIR [NAME ...]
  (default names: resnet50 densenet121 efficientnet_b0 regnet_y_400mf inception_v3)
"""
import sys, os, numpy as np, torch, torchvision, onnxruntime as ort
out = sys.argv[1]
batch = int(os.environ.get("BATCH", "8"))
names = sys.argv[2:] or ["resnet50", "densenet121", "efficientnet_b0", "regnet_y_400mf", "inception_v3"]
unknown = [n for n in names if not callable(getattr(torchvision.models, n, None))]
if unknown:
    sys.exit(f"export_torchvision.py: not a torchvision model: {', '.join(unknown)}")
for name in names:
    torch.manual_seed(0)
    kw = {"weights": None}
    if name == "inception_v3":
        kw.update(aux_logits=True, init_weights=True)
    m = getattr(torchvision.models, name)(**kw)
    hw = 299 if name == "inception_v3" else 224
    # Layers an architecture initialises to zero (ViT's classifier head)
    # get seeded normal weights, so the output is not a constant.
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear) and not mod.weight.detach().any():
            torch.nn.init.normal_(mod.weight, std=0.02)
    # BatchNorm statistics from a few random batches (cumulative average),
    # so activations keep a sane scale through the network.
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats(); mod.momentum = None
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, 3, hw, hw))
    m.eval()
    x = torch.randn(batch, 3, hw, hw)
    d = os.path.join(out, name); os.makedirs(d, exist_ok=True)
    torch.onnx.export(m, x, os.path.join(d, "model.onnx"), opset_version=17, dynamo=False,
                      input_names=["input"], output_names=["output"])
    np.save(os.path.join(d, "input.npy"), x.numpy())
    s = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    y = s.run(None, {"input": x.numpy()})[0]
    np.save(os.path.join(d, "output.npy"), y)
    with torch.no_grad():
        t = m(x).numpy()
        exact = m.double()(x.double()).numpy()
    np.save(os.path.join(d, "output_f64.npy"), exact)
    print(name, y.shape, "ort vs torch max abs", float(np.abs(y - t).max()),
          "ort vs float64 max abs", float(np.abs(y - exact).max()), flush=True)

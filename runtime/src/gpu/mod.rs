//! GPU executables: WGSL compute shaders run through wgpu.
//!
//! The code generator (`dnnc-compiler`, `codegen::gpu`) hands over a
//! [`GpuProgram`]: every shader's source and grid, the weights, and where
//! each graph input and output lives. This module owns everything that
//! talks to the driver: adapter choice ([`GpuDevice::open`],
//! [`adapters`]), the two storage buffers every shader binds, pipelines
//! built once per executable, and runs that record one command encoder.
//!
//! # Memory model
//!
//! Every shader binds the same two storage buffers, so one bind group
//! serves the whole program and no per-kernel binding can be wrong:
//!
//! - binding 0, `wts: array<u32>` (read-only): weights and compile-time
//!   constants, uploaded once when the executable is built;
//! - binding 1, `act: array<u32>` (read-write): the activation arena. The
//!   compiler places every intermediate value, graph input and output at a
//!   word offset with the liveness planner (`dnnc_ir::memplan`), so values
//!   whose lifetimes do not overlap share memory, as on the CPU.
//!
//! Elements are 32-bit words: `f32` as its bits, `bool` as 0/1, and `i64`
//! as a two's-complement `i32` (WGSL has no 64-bit integers in its core;
//! an input outside the `i32` range is rejected with an error, not
//! wrapped). Binding whole buffers, rather than sub-ranges per value,
//! keeps offsets free of the 256-byte binding alignment and lets a kernel
//! read and write the arena without two bindings of one buffer.

use dnnc_ir::{DType, Tensor, TensorType};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a GPU could not be used or a run failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter at all (no driver, no software renderer).
    #[error("no GPU adapter found ({0}); install a Vulkan, Metal, DX12 or GL driver (lavapipe: `apt-get install mesa-vulkan-drivers libvulkan1`)")]
    NoAdapter(String),
    /// `--adapter` named one that does not exist.
    #[error("no GPU adapter matches `{choice}`; available: {available}")]
    AdapterNotFound {
        /// What was asked for.
        choice: String,
        /// The adapters there are, one per `; `.
        available: String,
    },
    /// The adapter refused a device.
    #[error("GPU adapter `{adapter}` refused a device: {message}")]
    Device {
        /// Adapter name.
        adapter: String,
        /// The driver's message.
        message: String,
    },
    /// The program needs more than the device allows.
    #[error("GPU limit exceeded: {0}")]
    Limit(String),
    /// The device ran out of memory.
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    /// The device was lost (driver reset, removed, timed out).
    #[error("GPU device lost: {0}")]
    Lost(String),
    /// wgpu rejected a pipeline or command (a code generator bug).
    #[error("GPU rejected kernel `{kernel}`: {message}")]
    Validation {
        /// Kernel (or stage) name.
        kernel: String,
        /// wgpu's message.
        message: String,
    },
    /// The caller's inputs do not fit the program.
    #[error("{0}")]
    Input(String),
    /// A kernel found bad data while running (e.g. a Gather index out of
    /// range): the message names the node.
    #[error("run failed: {0}")]
    Kernel(String),
}

/// Which adapter to run on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AdapterChoice {
    /// wgpu's high-performance preference (a discrete GPU over an
    /// integrated one over a software renderer).
    #[default]
    Default,
    /// Position in [`adapters`]' list.
    Index(usize),
    /// First adapter whose name contains this (case-insensitive).
    Name(String),
}

impl AdapterChoice {
    /// Parses `--adapter`: a number is an index, anything else a name.
    pub fn parse(s: &str) -> AdapterChoice {
        match s.parse::<usize>() {
            Ok(i) => AdapterChoice::Index(i),
            Err(_) => AdapterChoice::Name(s.to_string()),
        }
    }
}

impl std::fmt::Display for AdapterChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdapterChoice::Default => write!(f, "default"),
            AdapterChoice::Index(i) => write!(f, "{i}"),
            AdapterChoice::Name(n) => write!(f, "{n}"),
        }
    }
}

/// The device limits the code generator sizes workgroups and tiles by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuLimits {
    /// Invocations in one workgroup.
    pub max_invocations: u32,
    /// Workgroup size along x.
    pub max_size_x: u32,
    /// Workgroup size along y.
    pub max_size_y: u32,
    /// Bytes of `var<workgroup>` memory.
    pub max_workgroup_storage: u32,
    /// Workgroups along one grid dimension.
    pub max_groups_per_dim: u32,
    /// Bytes one storage-buffer binding may span.
    pub max_binding_bytes: u64,
    /// Workgroups the device keeps busy at once, below which a smaller
    /// grid leaves it partly idle: 64 for a GPU (a few per compute unit
    /// of anything larger than an integrated GPU; wgpu reports no unit
    /// count), the host's thread count for a software adapter (lavapipe
    /// runs workgroups on CPU threads), where bigger register blocks beat
    /// more workgroups.
    pub busy_groups: u32,
}

impl Default for GpuLimits {
    /// WebGPU's guaranteed minimums: what every adapter offers, used when
    /// shaders are generated without a device (`dnnc ir --emit wgsl`).
    fn default() -> Self {
        let l = wgpu::Limits::default();
        GpuLimits::from_wgpu(&l)
    }
}

impl GpuLimits {
    fn from_wgpu(l: &wgpu::Limits) -> GpuLimits {
        GpuLimits {
            max_invocations: l.max_compute_invocations_per_workgroup,
            max_size_x: l.max_compute_workgroup_size_x,
            max_size_y: l.max_compute_workgroup_size_y,
            max_workgroup_storage: l.max_compute_workgroup_storage_size,
            max_groups_per_dim: l.max_compute_workgroups_per_dimension,
            max_binding_bytes: l.max_storage_buffer_binding_size.min(l.max_buffer_size),
            busy_groups: 64,
        }
    }

    fn for_adapter(l: &wgpu::Limits, ty: wgpu::DeviceType) -> GpuLimits {
        let mut g = GpuLimits::from_wgpu(l);
        if ty == wgpu::DeviceType::Cpu {
            g.busy_groups = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
        }
        g
    }
}

/// One adapter as `dnnc devices` lists it.
#[derive(Clone, Debug)]
pub struct AdapterDesc {
    /// Position in the list (what `--adapter N` takes).
    pub index: usize,
    /// Adapter name (`llvmpipe (LLVM 15.0.6, 256 bits)`, a GPU's name).
    pub name: String,
    /// Graphics API (Vulkan, Metal, Dx12, Gl).
    pub backend: String,
    /// Discrete, integrated, virtual, CPU (software), other.
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Its compute limits.
    pub limits: GpuLimits,
    /// Whether it has timestamp queries (`--profile` per-kernel times).
    pub timestamps: bool,
}

impl std::fmt::Display for AdapterDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.limits;
        write!(
            f,
            "{}: {} [{}, {}] driver {}; workgroup <= {} invocations ({}x{}), {} B shared, {} groups/dim, binding <= {} MiB, {}",
            self.index,
            self.name,
            self.backend,
            self.device_type,
            self.driver,
            l.max_invocations,
            l.max_size_x,
            l.max_size_y,
            l.max_workgroup_storage,
            l.max_groups_per_dim,
            l.max_binding_bytes >> 20,
            if self.timestamps { "timestamp queries" } else { "no timestamp queries" }
        )
    }
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::all(),
        flags: wgpu::InstanceFlags::empty(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    })
}

fn describe(index: usize, a: &wgpu::Adapter) -> AdapterDesc {
    let info = a.get_info();
    AdapterDesc {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
        limits: GpuLimits::for_adapter(&a.limits(), info.device_type),
        timestamps: a.features().contains(wgpu::Features::TIMESTAMP_QUERY),
    }
}

fn all_adapters(inst: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .filter(|a| {
            a.get_downlevel_capabilities()
                .flags
                .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
        })
        .collect()
}

/// Every adapter that can run compute shaders, in `--adapter N` order.
pub fn adapters() -> Vec<AdapterDesc> {
    all_adapters(&instance())
        .iter()
        .enumerate()
        .map(|(i, a)| describe(i, a))
        .collect()
}

/// An opened device: what executables are built on. Cheap to share
/// (`Arc`); several executables may use one device.
pub struct GpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    desc: AdapterDesc,
    lost: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("adapter", &self.desc.name)
            .finish()
    }
}

impl GpuDevice {
    /// Opens the chosen adapter with all of its limits (so large models fit
    /// where the hardware allows).
    pub fn open(choice: &AdapterChoice) -> Result<Arc<GpuDevice>, GpuError> {
        let inst = instance();
        let list = all_adapters(&inst);
        let available = || {
            let names: Vec<String> = list
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{i}: {}", a.get_info().name))
                .collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join("; ")
            }
        };
        // The adapter at `found` in `list`, or why there is none.
        let pick = |found: Option<usize>| match found {
            Some(i) => Ok((i, list[i].clone())),
            None if list.is_empty() => Err(GpuError::NoAdapter("0 adapters enumerated".into())),
            None => Err(GpuError::AdapterNotFound {
                choice: choice.to_string(),
                available: available(),
            }),
        };
        let (index, adapter) = match choice {
            AdapterChoice::Default => {
                let a = pollster::block_on(inst.request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    ..Default::default()
                }))
                .ok()
                .or_else(|| list.first().cloned());
                let Some(a) = a else {
                    return Err(GpuError::NoAdapter(format!(
                        "{} adapters enumerated",
                        list.len()
                    )));
                };
                let name = a.get_info().name;
                let i = list
                    .iter()
                    .position(|x| x.get_info().name == name)
                    .unwrap_or(0);
                (i, a)
            }
            AdapterChoice::Index(i) => pick((*i < list.len()).then_some(*i))?,
            AdapterChoice::Name(n) => {
                let lower = n.to_lowercase();
                pick(
                    list.iter()
                        .position(|a| a.get_info().name.to_lowercase().contains(&lower)),
                )?
            }
        };
        let desc = describe(index, &adapter);
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("dnnc"),
            // Timestamps only where the adapter has them: they serve
            // `--profile`, and a run never needs them.
            required_features: if desc.timestamps {
                wgpu::Features::TIMESTAMP_QUERY
            } else {
                wgpu::Features::empty()
            },
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device {
            adapter: desc.name.clone(),
            message: e.to_string(),
        })?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut f) = flag.lock() {
                *f = Some(format!("{reason:?}: {msg}"));
            }
        });
        Ok(Arc::new(GpuDevice {
            device,
            queue,
            desc,
            lost,
        }))
    }

    /// The adapter this device runs on.
    pub fn adapter(&self) -> &AdapterDesc {
        &self.desc
    }

    /// The limits shaders must be generated for.
    pub fn limits(&self) -> GpuLimits {
        self.desc.limits
    }

    /// Destroys the device, as a driver reset or an unplugged GPU would:
    /// every later build or run on it fails with [`GpuError::Lost`]. How
    /// callers release a GPU early, and how tests reach that path.
    pub fn destroy(&self) {
        if let Ok(mut f) = self.lost.lock() {
            f.get_or_insert_with(|| "the device was destroyed".to_string());
        }
        self.device.destroy();
    }

    fn check_lost(&self) -> Result<(), GpuError> {
        match self.lost.lock().ok().and_then(|l| l.clone()) {
            Some(m) => Err(GpuError::Lost(m)),
            None => Ok(()),
        }
    }

    /// Runs `f` inside out-of-memory and validation error scopes and turns
    /// what they caught into errors.
    fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T, GpuError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(GpuError::OutOfMemory(format!("{what}: {e}")));
        }
        if let Some(e) = v {
            return Err(GpuError::Validation {
                kernel: what.to_string(),
                message: e.to_string(),
            });
        }
        self.check_lost()?;
        Ok(out)
    }
}

/// One graph input or output in the arena.
#[derive(Clone, Debug)]
pub struct GpuIo {
    /// Value name.
    pub name: String,
    /// Its type.
    pub ty: TensorType,
    /// Word offset in the arena (`act`).
    pub offset: usize,
}

/// One dispatch.
#[derive(Clone, Debug)]
pub struct GpuStage {
    /// Label (kernel name, plus the phase for multi-stage kernels).
    pub label: String,
    /// The WGSL source; entry point `main`.
    pub wgsl: String,
    /// Workgroups along x, y, z.
    pub workgroups: [u32; 3],
}

/// The dispatches of one fused kernel.
#[derive(Clone, Debug)]
pub struct GpuKernel {
    /// Kernel name (its last node's result, as the fusion pass names it).
    pub name: String,
    /// The ops it implements, `+`-joined.
    pub op: String,
    /// Its stages, run in order (Winograd: input transform, batched GEMM,
    /// output transform; most kernels: one).
    pub stages: Vec<GpuStage>,
    /// Names of the graph nodes fused into it, in order (for profiles).
    pub nodes: Vec<String>,
    /// The convolution algorithm, for conv kernels (for profiles).
    pub algo: Option<String>,
}

/// What the code generator produces: shaders, weights and the arena
/// layout. Device-independent except for the limits it was generated for.
#[derive(Clone, Debug, Default)]
pub struct GpuProgram {
    /// Graph name, for messages.
    pub graph: String,
    /// Initial contents of the weight buffer (binding 0), in words.
    pub weights: Vec<u32>,
    /// Size of the activation arena (binding 1), in words.
    pub arena_words: usize,
    /// Graph inputs, in declaration order.
    pub inputs: Vec<GpuIo>,
    /// Graph outputs, in order. An output may live in the weight buffer
    /// (a constant output): then `offset` indexes the weights.
    pub outputs: Vec<(GpuIo, bool)>,
    /// Kernels in execution order.
    pub kernels: Vec<GpuKernel>,
    /// Messages of the error codes kernels may raise (code `i + 1` is
    /// `errors[i]`), e.g. a Gather index out of range.
    pub errors: Vec<String>,
    /// Arena word where a kernel stores its error code (zeroed before each
    /// run, read back with the outputs); meaningful when `errors` is not
    /// empty.
    pub error_word: usize,
}

impl GpuProgram {
    /// Every stage, in dispatch order.
    pub fn stages(&self) -> impl Iterator<Item = &GpuStage> {
        self.kernels.iter().flat_map(|k| k.stages.iter())
    }
}

/// A program on a device: pipelines built, weights uploaded. Reusable and
/// thread-safe; runs are serialised on the device's queue.
pub struct GpuExecutable {
    dev: Arc<GpuDevice>,
    program: GpuProgram,
    pipelines: Vec<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    arena: wgpu::Buffer,
    weights: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Byte offset of each output in `readback`.
    readback_at: Vec<u64>,
    /// Byte offset of the error word in `readback`.
    error_at: u64,
    /// Timestamp queries around each kernel, where the device has them.
    profiler: Option<Profiler>,
    run_lock: Mutex<()>,
}

impl std::fmt::Debug for GpuExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuExecutable")
            .field("graph", &self.program.graph)
            .field("kernels", &self.program.kernels.len())
            .field("adapter", &self.dev.desc.name)
            .finish()
    }
}

fn words_of(t: &Tensor, what: &str) -> Result<Vec<u32>, GpuError> {
    Ok(match t {
        Tensor::F32(a) => a.iter().map(|x| x.to_bits()).collect(),
        Tensor::Bool(a) => a.iter().map(|&b| b as u32).collect(),
        Tensor::I64(a) => a
            .iter()
            .map(|&x| {
                i32::try_from(x).map(|v| v as u32).map_err(|_| {
                    GpuError::Input(format!(
                        "{what}: i64 value {x} does not fit the GPU's 32-bit integers"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    })
}

/// Converts a tensor to the GPU's word representation (i64 as i32, bool
/// as 0/1); `what` names it in the error when a value does not fit.
pub fn tensor_words(t: &Tensor, what: &str) -> Result<Vec<u32>, GpuError> {
    words_of(t, what)
}

fn tensor_from_words(ty: &TensorType, w: &[u32]) -> Result<Tensor, GpuError> {
    let shape = ndarray::IxDyn(&ty.shape);
    let bad = |e: ndarray::ShapeError| GpuError::Input(format!("output shape: {e}"));
    Ok(match ty.dtype {
        DType::F32 => Tensor::F32(
            ndarray::ArrayD::from_shape_vec(shape, w.iter().map(|&x| f32::from_bits(x)).collect())
                .map_err(bad)?,
        ),
        DType::I64 => Tensor::I64(
            ndarray::ArrayD::from_shape_vec(shape, w.iter().map(|&x| x as i32 as i64).collect())
                .map_err(bad)?,
        ),
        DType::Bool => Tensor::Bool(
            ndarray::ArrayD::from_shape_vec(shape, w.iter().map(|&x| x != 0).collect())
                .map_err(bad)?,
        ),
    })
}

impl GpuExecutable {
    /// Builds every pipeline once and uploads the weights.
    pub fn new(dev: Arc<GpuDevice>, program: GpuProgram) -> Result<GpuExecutable, GpuError> {
        dev.check_lost()?;
        let d = &dev.device;
        let max = dev.limits().max_binding_bytes;
        let wbytes = (program.weights.len().max(4) * 4) as u64;
        let abytes = (program.arena_words.max(4) * 4) as u64;
        for (what, b) in [("weights", wbytes), ("activation arena", abytes)] {
            if b > max {
                return Err(GpuError::Limit(format!(
                    "the {what} need {} MiB in one storage binding; `{}` allows {} MiB",
                    b >> 20,
                    dev.desc.name,
                    max >> 20
                )));
            }
        }
        let layout_entry = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let out_words: Vec<usize> = program
            .outputs
            .iter()
            .map(|(io, _)| io.ty.shape.iter().product::<usize>())
            .collect();
        let mut readback_at = Vec::new();
        let mut rb = 0u64;
        for &n in &out_words {
            readback_at.push(rb);
            rb += (n.max(1) * 4) as u64;
        }
        // The error word follows the outputs.
        let error_at = rb;
        rb += 4;
        let (weights, arena, readback, bind_group) = dev.scoped("buffers", || {
            // The two storage buffers the shaders bind (0: weights, 1:
            // activations), with the same usages.
            let storage = |label: &str, size: u64| {
                d.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_DST
                        | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                })
            };
            let weights = storage("weights", wbytes);
            let arena = storage("activations", abytes);
            let readback = d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: rb.max(4),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("dnnc"),
                entries: &[layout_entry(0, true), layout_entry(1, false)],
            });
            let bind_group = d.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("dnnc"),
                layout: &layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: weights.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: arena.as_entire_binding(),
                    },
                ],
            });
            (weights, arena, readback, (bind_group, layout))
        })?;
        let (bind_group, layout) = bind_group;
        if !program.weights.is_empty() {
            dev.queue
                .write_buffer(&weights, 0, &words_to_bytes(&program.weights));
        }
        let pl = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("dnnc"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let mut pipelines = Vec::new();
        for st in program.stages() {
            for (i, &g) in st.workgroups.iter().enumerate() {
                if g > dev.limits().max_groups_per_dim {
                    return Err(GpuError::Limit(format!(
                        "kernel `{}` dispatches {g} workgroups along axis {i}; the device allows {}",
                        st.label,
                        dev.limits().max_groups_per_dim
                    )));
                }
            }
            let p = dev.scoped(&st.label, || {
                let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(&st.label),
                    source: wgpu::ShaderSource::Wgsl(st.wgsl.as_str().into()),
                });
                d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&st.label),
                    layout: Some(&pl),
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })?;
            pipelines.push(p);
        }
        let profiler = Profiler::new(&dev, program.kernels.len());
        Ok(GpuExecutable {
            dev,
            program,
            pipelines,
            bind_group,
            arena,
            weights,
            readback,
            readback_at,
            error_at,
            profiler,
            run_lock: Mutex::new(()),
        })
    }

    /// The program it runs.
    pub fn program(&self) -> &GpuProgram {
        &self.program
    }

    /// The adapter it runs on.
    pub fn adapter(&self) -> &AdapterDesc {
        &self.dev.desc
    }

    /// Runs the program: uploads `inputs` (by name), records every
    /// dispatch in one command encoder, reads back only the outputs.
    pub fn run(&self, inputs: &[(String, Tensor)]) -> Result<Vec<Tensor>, GpuError> {
        self.execute(inputs, false).map(|(o, _)| o)
    }

    /// Whether [`GpuExecutable::run_profiled`] can time kernels here.
    pub fn can_profile(&self) -> bool {
        self.profiler.is_some()
    }

    /// Like [`GpuExecutable::run`], also returning each kernel's GPU time
    /// (timestamp queries around one compute pass per kernel, so the
    /// numbers include no host work). Needs an adapter with timestamp
    /// queries ([`AdapterDesc::timestamps`]).
    pub fn run_profiled(
        &self,
        inputs: &[(String, Tensor)],
    ) -> Result<(Vec<Tensor>, Vec<Duration>), GpuError> {
        if self.profiler.is_none() {
            return Err(GpuError::Limit(format!(
                "per-kernel times need timestamp queries, which `{}` lacks (or the program has more than {} kernels)",
                self.dev.desc.name,
                Profiler::MAX_KERNELS
            )));
        }
        self.execute(inputs, true)
            .map(|(o, t)| (o, t.unwrap_or_default()))
    }

    fn execute(
        &self,
        inputs: &[(String, Tensor)],
        profile: bool,
    ) -> Result<(Vec<Tensor>, Option<Vec<Duration>>), GpuError> {
        let prof = if profile {
            self.profiler.as_ref()
        } else {
            None
        };
        let _guard = self.run_lock.lock().map_err(|_| {
            GpuError::Lost("a previous run panicked while holding the device".into())
        })?;
        self.dev.check_lost()?;
        let q = &self.dev.queue;
        for io in &self.program.inputs {
            let t = inputs
                .iter()
                .find(|(n, _)| *n == io.name)
                .map(|(_, t)| t)
                .ok_or_else(|| GpuError::Input(format!("input `{}` was not given", io.name)))?;
            if t.ty() != io.ty {
                return Err(GpuError::Input(format!(
                    "input `{}`: expected {}, got {}",
                    io.name,
                    io.ty,
                    t.ty()
                )));
            }
            let w = words_of(t, &format!("input `{}`", io.name))?;
            if !w.is_empty() {
                q.write_buffer(&self.arena, (io.offset * 4) as u64, &words_to_bytes(&w));
            }
        }
        for (n, _) in inputs {
            if !self.program.inputs.iter().any(|io| io.name == *n) {
                return Err(GpuError::Input(format!(
                    "`{n}` is not an input of `{}`",
                    self.program.graph
                )));
            }
        }
        let checks = !self.program.errors.is_empty();
        if checks {
            q.write_buffer(&self.arena, (self.program.error_word * 4) as u64, &[0; 4]);
        }
        let d = &self.dev.device;
        self.dev.scoped("run", || {
            let mut enc = d.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("dnnc run"),
            });
            match prof {
                None => {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("dnnc"),
                        timestamp_writes: None,
                    });
                    pass.set_bind_group(0, &self.bind_group, &[]);
                    self.dispatch(&mut pass, 0..self.pipelines.len());
                }
                Some(pr) => {
                    // One pass per kernel, timestamps at its ends.
                    let mut first = 0;
                    for (k, kernel) in self.program.kernels.iter().enumerate() {
                        let n = kernel.stages.len();
                        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some(&kernel.name),
                            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                                query_set: &pr.set,
                                beginning_of_pass_write_index: Some(2 * k as u32),
                                end_of_pass_write_index: Some(2 * k as u32 + 1),
                            }),
                        });
                        pass.set_bind_group(0, &self.bind_group, &[]);
                        self.dispatch(&mut pass, first..first + n);
                        first += n;
                    }
                    let q = 2 * self.program.kernels.len() as u32;
                    enc.resolve_query_set(&pr.set, 0..q, &pr.resolve, 0);
                    enc.copy_buffer_to_buffer(&pr.resolve, 0, &pr.read, 0, Some(q as u64 * 8));
                }
            }
            for ((io, in_weights), &at) in self.program.outputs.iter().zip(&self.readback_at) {
                let n = io.ty.shape.iter().product::<usize>();
                if n == 0 {
                    continue;
                }
                let src = if *in_weights {
                    &self.weights
                } else {
                    &self.arena
                };
                enc.copy_buffer_to_buffer(
                    src,
                    (io.offset * 4) as u64,
                    &self.readback,
                    at,
                    Some((n * 4) as u64),
                );
            }
            if checks {
                enc.copy_buffer_to_buffer(
                    &self.arena,
                    (self.program.error_word * 4) as u64,
                    &self.readback,
                    self.error_at,
                    Some(4),
                );
            }
            q.submit([enc.finish()]);
        })?;
        let slice = self.readback.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let prof_rx = prof.map(|pr| {
            let (tx, rx) = std::sync::mpsc::channel();
            pr.read.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            rx
        });
        d.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(Duration::from_secs(600)),
        })
        .map_err(|e| GpuError::Lost(format!("waiting for the run: {e}")))?;
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(GpuError::Lost(format!("reading the outputs back: {e}"))),
            Err(_) => {
                self.dev.check_lost()?;
                return Err(GpuError::Lost(
                    "the output read-back never completed".into(),
                ));
            }
        }
        let mut outs = Vec::new();
        let mut code = 0u32;
        {
            let data = slice
                .get_mapped_range()
                .map_err(|e| GpuError::Lost(format!("reading the outputs back: {e:?}")))?;
            if checks {
                let at = self.error_at as usize;
                code = u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
            }
            for ((io, _), &at) in self.program.outputs.iter().zip(&self.readback_at) {
                let n = io.ty.shape.iter().product::<usize>();
                let bytes = &data[at as usize..at as usize + n * 4];
                let w: Vec<u32> = bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                outs.push(tensor_from_words(&io.ty, &w)?);
            }
        }
        self.readback.unmap();
        let mut times = None;
        if let (Some(pr), Some(rx)) = (prof, prof_rx) {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(Ok(())) => {}
                _ => return Err(GpuError::Lost("the kernel timestamps never arrived".into())),
            }
            let ts: Vec<u64> = {
                let data = pr
                    .read
                    .slice(..)
                    .get_mapped_range()
                    .map_err(|e| GpuError::Lost(format!("reading the timestamps: {e:?}")))?;
                data.chunks_exact(8)
                    .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect()
            };
            pr.read.unmap();
            let period = f64::from(self.dev.queue.get_timestamp_period());
            times = Some(
                (0..self.program.kernels.len())
                    .map(|k| {
                        let ticks = ts[2 * k + 1].saturating_sub(ts[2 * k]);
                        Duration::from_nanos((ticks as f64 * period) as u64)
                    })
                    .collect(),
            );
        }
        self.dev.check_lost()?;
        if code != 0 {
            let msg = self
                .program
                .errors
                .get(code as usize - 1)
                .cloned()
                .unwrap_or_else(|| format!("a kernel raised unknown error code {code}"));
            return Err(GpuError::Kernel(msg));
        }
        Ok((outs, times))
    }

    /// Records the dispatches of stages `range` into `pass`.
    fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>, range: std::ops::Range<usize>) {
        let stages: Vec<&GpuStage> = self.program.stages().collect();
        for i in range {
            let [x, y, z] = stages[i].workgroups;
            if x == 0 || y == 0 || z == 0 {
                continue;
            }
            pass.set_pipeline(&self.pipelines[i]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}

/// Timestamp queries around each kernel's compute pass.
struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
}

impl Profiler {
    /// Query sets hold at most 4096 queries, two per kernel.
    const MAX_KERNELS: usize = 2048;

    fn new(dev: &GpuDevice, kernels: usize) -> Option<Profiler> {
        if !dev.desc.timestamps || kernels == 0 || kernels > Self::MAX_KERNELS {
            return None;
        }
        let d = &dev.device;
        let bytes = (2 * kernels * 8) as u64;
        dev.scoped("profiler", || Profiler {
            set: d.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernel times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * kernels as u32,
            }),
            resolve: d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            read: d.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamp read-back"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        })
        .ok()
    }
}

fn words_to_bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

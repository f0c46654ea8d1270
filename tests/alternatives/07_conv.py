"""Correct answers to chapter 07 written differently from the course's solution.

ALTERNATIVES = {what is different: {exercise: the cell's code}}; see tests/chapters/test_alternative_solutions.py.
"""
from __future__ import annotations

from solution_text import rewrite, solution


def _rewrite(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("07_conv", exercise), *replacements, what="alternative")


ALTERNATIVES = {
    "strides built in a loop, the im2col matrix through NumPy, other error wording": {
        "ex_unfold": _rewrite("ex_unfold", ("""    s_n, s_c, s_h, s_w = x.stride()
    return x.as_strided((n, c, ho, wo, kh, kw), (s_n, s_c, s_h * sh, s_w * sw, s_h * dh, s_w * dw),
                        x.storage_offset())""", """    steps = list(x.stride())
    for d, (step, dil) in enumerate([(sh, dh), (sw, dw)]):
        steps.append(x.stride(2 + d) * dil)
        steps[2 + d] = x.stride(2 + d) * step
    return x.as_strided([n, c, ho, wo, kh, kw], steps)"""),
                              ("""        raise RuntimeError(f"Given input with spatial size""", """        raise RuntimeError("no window fits" or f\""""),
                              ("""    return windows.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, ho * wo)""",
                               """    matrix = np.moveaxis(windows.numpy(), (4, 5), (2, 3))
    return from_numpy(np.ascontiguousarray(matrix).reshape(n, c * kh * kw, ho * wo))""")),
    },
    "channels_last's strides as a running product over its order, its rule by comparison with them": {
        "ex_channels_last": _rewrite("ex_channels_last", ("""    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)""", """    strides, step = [0] * 4, 1
    for d in (1, 3, 2, 0):  # innermost first
        strides[d] = step
        step *= shape[d]
    return tuple(strides)"""), ("""    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True""", """    fresh = channels_last_strides(shape)
    return all(size == 1 or s == f for size, s, f in zip(shape, stride, fresh))""")),
    },
    "a direct convolution (a loop over the kernel's taps), 'same' as an explicit pad": {
        "ex_conv": _rewrite("ex_conv", ("""    filters = weight.numpy().reshape(groups, og, k)  # each group's filters, one per row
    out = np.empty((n, groups, og, ho * wo), dtype=filters.dtype)
    for part in cache_batches(n, c * kh * kw * ho * wo * filters.itemsize):
        chunk = windows[part]
        m = chunk.shape[0]
        # im2col: these images' windows copied once, as (images, G, C/G·kH·kW, H_out·W_out); then one product per
        # image and group, written straight into the output
        taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
        cols = taps.reshape(m, groups, k, ho * wo)
        np.matmul(filters, cols, out=out[part])
    if bias is not None:
        out += bias.numpy().reshape(1, groups, og, 1)
""", """    w = weight.numpy()
    out = np.zeros((n, o, ho, wo), dtype=w.dtype)
    if bias is not None:
        out += bias.numpy().reshape(1, o, 1, 1)
    for g in range(groups):
        for p in range(kh):
            for q in range(kw):
                tap = windows[:, g * cg:(g + 1) * cg, :, :, p, q]  # (N, C/G, H_out, W_out)
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", tap, w[g * og:(g + 1) * og, :, p, q])
"""), ("""            padding = (totals[0] // 2, totals[1] // 2)
            extra = (totals[0] - 2 * padding[0], totals[1] - 2 * padding[1])
            if extra != (0, 0):  # an odd total: the extra zero goes after (right, bottom)
                input = pad(input, (0, extra[1], 0, extra[0]))""",
                                    """            top, left = totals[0] // 2, totals[1] // 2
            input = pad(input, (left, totals[1] - left, top, totals[0] - top))
            padding = (0, 0)""")),
    },
    "col2im by np.add.at over index arrays, the weight's gradient by einsum": {
        "ex_conv_backward": _rewrite("ex_conv_backward", ("""    for p in range(kh):
        for q in range(kw):
            image[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh, q * dw:q * dw + sw * (wo - 1) + 1:sw] += blocks[:, :, p, q]
""", """    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(ho) * sh)[None, None, :, None]
    cols_ = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(wo) * sw)[None, None, None, :]
    rows, cols_ = np.broadcast_arrays(rows, cols_)
    np.add.at(image, (slice(None), slice(None), rows, cols_), blocks)
"""), ("""        gw = np.zeros((groups, og, k), dtype=g.dtype)
        for part in batches:  # these images' im2col matrices (one copy), then (O/G, L) @ (L, C/G·kH·kW), summed
            chunk = windows[part]
            m = chunk.shape[0]
            taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
            cols = taps.reshape(m, groups, k, ho * wo)
            gw += np.matmul(grads[part], cols.transpose(0, 1, 3, 2)).sum(axis=0)""",
       """        gw = np.empty((groups, og, k), dtype=g.dtype)
        for j in range(groups):  # the whole batch at once, by einsum over the window view
            gw[j] = np.einsum("nohw,nchwpq->ocpq", grads[:, j].reshape(n, og, ho, wo),
                              windows[:, j * cg:(j + 1) * cg], optimize=True).reshape(og, k)""")),
    },
    "max-pool by a loop over the taps, its backward by np.add.at; avg-pool as a mean over the window view": {
        "ex_pool": _rewrite("ex_pool", ("""    flat = windows.reshape(n, c, ho, wo, kh * kw)
    best = flat.argmax(axis=-1)  # the first maximum in row-major order (and the first NaN), as torch
    out = np.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
""", """    out = windows[..., 0, 0].copy()
    best = np.zeros(out.shape, dtype=np.int64)
    for tap in range(1, kh * kw):
        value = windows[..., tap // kw, tap % kw]
        better = (value > out) | (np.isnan(value) & ~np.isnan(out))
        out = np.where(better, value, out)
        best = np.where(better, tap, best)
"""), ("""    flat = (np.arange(n * c)[:, None] * (h * w) + where).ravel()
    sums = np.bincount(flat, weights=g.ravel(), minlength=n * c * h * w)  # adds where windows chose one pixel
    return from_numpy(sums.astype(g.dtype).reshape(n, c, h, w))""", """    sums = np.zeros((n * c, h * w), dtype=g.dtype)
    np.add.at(sums, (np.arange(n * c)[:, None], where), g)
    return from_numpy(sums.reshape(n, c, h, w))""")),
    },
    "im2col with one thread per element of the matrix (no loop over the taps), the launch from cols' size": {
        "ex_device": _rewrite("ex_device", ("""    long long L = Hout * Wout, windows = N * C * L;
    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < windows;
         index += (long long)blockDim.x * gridDim.x) {
        long long j = index % Wout, i = index / Wout % Hout, c = index / L % C, n = index / L / C;
        const T* image = x + n * sN + c * sC;
        T* column = cols + (n * C + c) * kH * kW * L + i * Wout + j;  // row c*kH*kW, column i*Wout + j
        for (long long p = 0; p < kH; ++p)
            for (long long q = 0; q < kW; ++q) {
                long long h = i * strideH - pH + p * dH, w = j * strideW - pW + q * dW;
                column[(p * kW + q) * L] = (h >= 0 && h < H && w >= 0 && w < W) ? image[h * sH + w * sW] : T(0);
            }
    }""", """    long long total = N * C * kH * kW * Hout * Wout;
    long long step = (long long)blockDim.x * gridDim.x;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += step) {
        long long column = e % (Hout * Wout), row = e / (Hout * Wout) % (C * kH * kW), n = e / (Hout * Wout * C * kH * kW);
        long long c = row / (kH * kW), p = row / kW % kH, q = row % kW;
        long long h = column / Wout * strideH - pH + p * dH;
        long long w = column % Wout * strideW - pW + q * dW;
        bool inside = 0 <= h && h < H && 0 <= w && w < W;
        cols[e] = inside ? x[n * sN + c * sC + h * sH + w * sW] : (T)0;
    }"""), ("""    geometry = launch_1d(n * c * ho * wo, max_blocks=max_blocks)""",
            """    geometry = launch_1d(cols.numel(), threads=128, max_blocks=max_blocks)""")),
    },
    "col2im as torch's im2col.cuh writes it: a loop over the windows that can cover the pixel, 512 threads a block": {
        "ex_col2im": _rewrite("ex_col2im", ("""        long long w = index % W, h = index / W % H, plane = index / (H * W);  // plane = n * C + c
        const T* column = cols + plane * kH * kW * L;
        T sum = T(0);
        for (long long p = 0; p < kH; ++p) {
            long long top = h + pH - p * dH;  // where window row i starts: i * strideH
            if (top < 0 || top % strideH != 0 || top / strideH >= Hout)
                continue;
            for (long long q = 0; q < kW; ++q) {
                long long left = w + pW - q * dW;
                if (left < 0 || left % strideW != 0 || left / strideW >= Wout)
                    continue;
                sum += column[(p * kW + q) * L + (top / strideH) * Wout + left / strideW];
            }
        }
        image[index] = sum;""", """        long long w_im = index % W + pW, h_im = index / W % H + pH, c_im = index / (H * W);
        long long extent_w = (kW - 1) * dW + 1, extent_h = (kH - 1) * dH + 1;
        long long w_start = w_im < extent_w ? 0 : (w_im - extent_w) / strideW + 1;
        long long w_end = min(w_im / strideW + 1, Wout);
        long long h_start = h_im < extent_h ? 0 : (h_im - extent_h) / strideH + 1;
        long long h_end = min(h_im / strideH + 1, Hout);
        T val = 0;
        for (long long i = h_start; i < h_end; ++i)
            for (long long j = w_start; j < w_end; ++j) {
                long long h_k = h_im - i * strideH, w_k = w_im - j * strideW;
                if (h_k % dH == 0 && w_k % dW == 0)
                    val += cols[((c_im * kH + h_k / dH) * kW + w_k / dW) * L + i * Wout + j];
            }
        image[index] = val;"""), ("""    geometry = launch_1d(n * c * h * w, max_blocks=max_blocks)""",
                                  """    geometry = launch_1d(image.numel(), threads=512, max_blocks=max_blocks)""")),
    },
    "Conv2d's repr from a list of the non-default fields": {
        "ex_layers": _rewrite("ex_layers", ("""        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s""", """        parts = [str(self.in_channels), str(self.out_channels), f"kernel_size={self.kernel_size}",
                 f"stride={self.stride}"]
        for name, default in (("padding", (0, 0)), ("dilation", (1, 1)), ("groups", 1)):
            if getattr(self, name) != default:
                parts.append(f"{name}={getattr(self, name)}")
        return ", ".join(parts + (["bias=False"] if self.bias is None else []))""")),
    },
    "ceil_mode's count with math.ceil and math.floor of the exact quotient": {
        "ex_pool": _rewrite("ex_pool", ("""    count = (size + 2 * padding - span + (stride - 1 if ceil_mode else 0)) // stride + 1""",
                                        """    exact = (size + 2 * padding - span) / stride
    count = (math.ceil(exact) if ceil_mode else math.floor(exact)) + 1""")),
    },
    "adaptive windows as a boolean mask, the products in the other order": {
        "ex_adaptive": _rewrite("ex_adaptive", ("""    matrix = np.zeros((out, size), dtype=dtype)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix""", """    i = np.arange(out)
    starts, ends = (i * size) // out, ((i + 1) * size + out - 1) // out
    inside = (np.arange(size) >= starts[:, None]) & (np.arange(size) < ends[:, None])
    return (inside / (ends - starts)[:, None]).astype(dtype)"""), ("return rows @ x @ cols", "return rows @ (x @ cols)")),
    },
    "BatchNorm2d in torch's own words: float() of the count, batch statistics when both buffers are missing": {
        "ex_batchnorm2d": _rewrite("ex_batchnorm2d", (
            "factor = 1.0 / float(self.num_batches_tracked.item())", "factor = 1.0 / float(self.num_batches_tracked)"), (
            "batch_statistics = self.training or self.running_mean is None",
            "batch_statistics = self.training or (self.running_mean is None and self.running_var is None)")),
    },
    "BatchNorm2d through chapter 03's BatchNorm1d on its (N, C, H·W) view; batch norm's kernels over (C, n) rows": {
        "ex_batchnorm2d": _rewrite("ex_batchnorm2d", ("""        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average
                factor = 1.0 / float(self.num_batches_tracked.item())
        batch_statistics = self.training or self.running_mean is None
        tracked = not self.training or self.track_running_stats
        return batch_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                          self.weight, self.bias, batch_statistics, factor, self.eps)""",
            """        n, c, h, w = x.shape  # the composition of chapter 03: slower (a dozen autograd nodes), as right
        return super().forward(x.reshape(n, c, h * w)).reshape(n, c, h, w)""")),
        "ex_batch_norm": _rewrite("ex_batch_norm", ("""    a = x.numpy()
    axes, shape = channel_dims(x)
    if training:
        n = a.size // a.shape[1]
        mean = a.mean(axis=axes)
        centered = a - mean.reshape(shape)
        var = (centered * centered).mean(axis=axes)  # biased: this batch's own spread""",
            """    a = x.numpy()
    axes, shape = channel_dims(x)
    if training:
        rows = np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)  # one row per channel: its n values
        n = rows.shape[1]
        mean = rows.sum(axis=1) / n
        var = ((rows - mean[:, None]) ** 2).sum(axis=1) / n
        centered = a - mean.reshape(shape)"""), ("""    x_hat = (a - mean.numpy().reshape(shape)) * invstd.numpy().reshape(shape)
    sum_g, sum_g_x_hat = g.sum(axis=axes), (g * x_hat).sum(axis=axes)""",
            """    x_hat = (a - mean.numpy().reshape(shape)) * invstd.numpy().reshape(shape)
    flat = (g.shape[0], g.shape[1], -1)  # (N, C, the rest): one einsum sums over N and the rest
    sum_g = np.einsum("ncl->c", g.reshape(flat))
    sum_g_x_hat = np.einsum("ncl,ncl->c", g.reshape(flat), x_hat.reshape(flat))""")),
    },
}

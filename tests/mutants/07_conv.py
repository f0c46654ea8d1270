"""Typical wrong answers to chapter 07, one dict per exercise: {what is wrong: the cell's code}, or a dict with the
code and what its message must show (tests/notebook_runs.Mutant). Each is the solution cell with one mistake put
in (`_wrong`); a replacement that no longer matches the solution fails loudly, here."""
from __future__ import annotations

from solution_text import rewrite, solution


def _wrong(exercise: str, *replacements: tuple[str, str]) -> str:
    return rewrite(solution("07_conv", exercise), *replacements, what=f"mutant of {exercise}", every=True)


def _ignoring_max_blocks(exercise: str, count: str, elements: str, what: str) -> dict:
    """A device exercise's two ways to launch more than max_blocks blocks: the launch alone, and with the kernel's
    grid-stride loop dropped, which such a grid hides (each thread has one element, and there are enough)."""
    launch = (f"launch_1d({elements}, max_blocks=max_blocks)", f"launch_1d({elements})")
    loop = (f"""    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < {count};
         index += (long long)blockDim.x * gridDim.x) {{""", f"""    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index < {count}) {{""")
    return {f"no grid-stride loop, hidden by a launch that ignores max_blocks (a grid as large as {what})":
            {"code": _wrong(exercise, loop, launch), "shows": "max_blocks"},
            "the launch ignores max_blocks": _wrong(exercise, launch)}


# BatchNorm2d's forward (ex_batchnorm2d): its dims check, its count of a batch, its one call
_BN2D_CHECK = """        if x.dim() != 4:
            raise ValueError(f"expected 4D input (got {x.dim()}D input)")
"""
_BN2D_COUNT = """            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average
                factor = 1.0 / float(self.num_batches_tracked.item())
"""
_BN2D_CALL = """        return batch_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                          self.weight, self.bias, batch_statistics, factor, self.eps)"""


MUTANTS = {
    "ex_unfold": {
        "the windows' strides from the shape (a contiguous x's), not from x.stride()": {
            "code": _wrong("ex_unfold", ("s_n, s_c, s_h, s_w = x.stride()", "s_n, s_c, s_h, s_w = (c * h * w, h * w, w, 1)")),
            "shows": "x.stride()"},
        "the dilation left out of the taps' strides": _wrong("ex_unfold", (
            "s_h * dh, s_w * dw)", "s_h, s_w)")),
        "stride and dilation swapped (the windows step by the dilation, the taps by the stride)": _wrong("ex_unfold", (
            "(s_n, s_c, s_h * sh, s_w * sw, s_h * dh, s_w * dw)", "(s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw)")),
        "the number of windows counted without the dilation": _wrong("ex_unfold", (
            "conv_output_size(h, kh, sh, 0, dh), conv_output_size(w, kw, sw, 0, dw)",
            "conv_output_size(h, kh, sh, 0, 1), conv_output_size(w, kw, sw, 0, 1)")),
        "the padding ignored": _wrong("ex_unfold", ("        x = pad(x, (pw, pw, ph, ph))\n", "        pass\n")),
        "the padding on the wrong dims (rows padded by the column padding)": _wrong("ex_unfold", (
            "pad(x, (pw, pw, ph, ph))", "pad(x, (ph, ph, pw, pw))")),
        "a copy of the windows, not a view": {
            "code": _wrong("ex_unfold", ("x.storage_offset())\n", "x.storage_offset()).contiguous()\n")),
            "shows": "not a copy"},
        "the storage offset dropped: a sliced x's windows start at the storage's start": _wrong("ex_unfold", (
            "x.storage_offset())\n", "0)\n")),
        "the im2col rows ordered (kH, kW, C) instead of (C, kH, kW)": _wrong("ex_unfold", (
            "windows.permute(0, 1, 4, 5, 2, 3)", "windows.permute(0, 4, 5, 1, 2, 3)")),
        "the im2col columns ordered (W_out, H_out)": _wrong("ex_unfold", (
            "windows.permute(0, 1, 4, 5, 2, 3)", "windows.permute(0, 1, 4, 5, 3, 2)")),
    },
    "ex_channels_last": {
        "the strides of the row-major order (N, C, H, W), not of (N, H, W, C)": _wrong("ex_channels_last", (
            "return (h * w * c, 1, w * c, c)", "return (c * h * w, h * w, w, 1)")),
        "H and W swapped in the strides (N, W, H, C in memory)": _wrong("ex_channels_last", (
            "return (h * w * c, 1, w * c, c)", "return (h * w * c, 1, c, h * c)")),
        "a size 0 or 1 counted as 1 in the strides (chapter 01's contiguous strides' habit)": _wrong(
            "ex_channels_last", ("return (h * w * c, 1, w * c, c)",
                                 "return (max(h, 1) * max(w, 1) * max(c, 1), 1, max(w, 1) * max(c, 1), max(c, 1))")),
        "no rank check: a 3-D shape unpacked (ValueError, not torch's RuntimeError)": _wrong("ex_channels_last", (
            "    if len(shape) != 4:\n        raise RuntimeError", "    if False:\n        raise RuntimeError")),
        "the walk in the order C, H, W, N": _wrong("ex_channels_last", ("for d in (1, 3, 2, 0):", "for d in (1, 2, 3, 0):")),
        "the strides of size-1 dims checked too": _wrong("ex_channels_last", (
            "        if shape[d] != 1:\n            if stride[d] != expected:", "        if True:\n            if stride[d] != expected:")),
        "chapter 01's exception kept: no elements taken as channels-last contiguous": _wrong("ex_channels_last", (
            "    expected = 1\n    for d in (1, 3, 2, 0):",
            "    if 0 in shape:\n        return True\n    expected = 1\n    for d in (1, 3, 2, 0):")),
        "a 3-D shape walked as if it were 4-D (an IndexError, not False)": _wrong("ex_channels_last", (
            "    if len(shape) != 4:\n        return False", "    if False:\n        return False")),
    },
    "ex_conv": {
        "groups mix channels: each group takes every G-th channel (channel g, g + G, ...), not a block": _wrong(
            "ex_conv", ("        taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw)",
                        "        taps = chunk.reshape(m, cg, groups, ho, wo, kh, kw).swapaxes(1, 2)")),
        "groups mix channels: every group uses the first group's filters": _wrong("ex_conv", (
            "filters = weight.numpy().reshape(groups, og, k)", "filters = weight.numpy()[:og].reshape(1, og, k)")),
        "the bias left out": _wrong("ex_conv", ("        out += bias.numpy().reshape(1, groups, og, 1)\n", "        pass\n")),
        "'same' padding split evenly even when the total is odd (the extra zero dropped)": _wrong("ex_conv", (
            "            if extra != (0, 0):", "            if False:")),
        "'same' padding's extra zero put before (left, top) instead of after": _wrong("ex_conv", (
            "input = pad(input, (0, extra[1], 0, extra[0]))", "input = pad(input, (extra[1], 0, extra[0], 0))")),
        "'same' padding without the dilation": _wrong("ex_conv", (
            "totals = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))", "totals = (kh - 1, kw - 1)")),
        "the channel check ignores groups (input channels against weight.shape[1])": _wrong("ex_conv", (
            "    if c != cg * groups:\n", "    if c != cg:\n")),
        "the kernel-size check on the unpadded input": _wrong("ex_conv", (
            "if h + 2 * padding[0] < spans[0] or w + 2 * padding[1] < spans[1]:", "if h < spans[0] or w < spans[1]:")),
        "no check that the output channels divide into groups": _wrong("ex_conv", (
            "    if o % groups:\n", "    if False:\n")),
        "no check of the bias's shape": _wrong("ex_conv", (
            "    if bias is not None and tuple(bias.shape) != (o,):\n", "    if False:\n")),
        "no check of a negative padding": _wrong("ex_conv", ("    if min(padding) < 0:\n", "    if False:\n")),
        "an unknown padding string taken as 'valid'": _wrong("ex_conv", (
            "        if padding == \"valid\":\n", "        if padding not in (\"same\",):\n")),
        "the im2col rows ordered (kH, kW, C) while the weight's are (C, kH, kW)": _wrong("ex_conv", (
            "        taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)",
            "        taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw).transpose(0, 1, 5, 6, 2, 3, 4)")),
        "the operator bypassed: convolution_cpu called directly (no autograd, no key sees it)": {
            "code": _wrong("ex_conv", ('out = dispatch("convolution", input, weight, bias, stride, padding, dilation, groups)',
                                       "out = convolution_cpu(input, weight, bias, stride, padding, dilation, groups)")),
            "shows": "aten::convolution"},
        "the result always row-major, whatever the input's memory format": _wrong("ex_conv", (
            "    return out if layout is contiguous_format else in_memory_format(out, layout)\n", "    return out\n")),
        "the memory format from the input alone (a channels-last weight ignored)": _wrong("ex_conv", (
            "layout = convolution_memory_format(input, weight)", "layout = convolution_memory_format(input, input)")),
        "the memory format decided after 'same' padded a row-major copy": _wrong("ex_conv", (
            "    layout = convolution_memory_format(input, weight)  # (before \"same\" pads a row-major copy of the input)\n", ""),
            ("    n, c, h, w = input.shape\n", "    n, c, h, w = input.shape\n    layout = convolution_memory_format(input, weight)\n")),
        "the result made channels last with contiguous(memory_format=...): size-1 dims keep row-major strides": _wrong(
            "ex_conv", ("in_memory_format(out, layout)", "out.contiguous(memory_format=layout)")),
        "a 3-D input keeps the batch dim of 1": _wrong("ex_conv", (
            "stride, padding, dilation, groups).squeeze(0)", "stride, padding, dilation, groups)")),
        "a 2-D input accepted as (H, W)": _wrong("ex_conv", ("    if input.dim() not in (3, 4):\n", "    if input.dim() < 2:\n"),
                                                ("    if input.dim() == 3:\n", "    if input.dim() == 2:\n        return conv2d(input[None, None], weight, bias, stride, padding, dilation, groups)[0, 0]\n    if input.dim() == 3:\n")),
    },
    "ex_conv_backward": {
        "col2im overwrites instead of adding: overlapping windows keep only the last share": {
            "code": _wrong("ex_conv_backward", ("] += blocks[:, :, p, q]", "] = blocks[:, :, p, q]")),
            "shows": "overlapping"},
        "the padding's share cut off at the wrong end (the top-left corner kept)": _wrong("ex_conv_backward", (
            "image[:, :, ph:ph + h, pw:pw + w]", "image[:, :, :h, :w]")),
        "col2im ignores the dilation (the taps added side by side)": _wrong("ex_conv_backward", (
            "p * dh:p * dh + sh * (ho - 1) + 1:sh, q * dw:q * dw + sw * (wo - 1) + 1:sw",
            "p:p + sh * (ho - 1) + 1:sh, q:q + sw * (wo - 1) + 1:sw")),
        "col2im's window count from the unpadded size": _wrong("ex_conv_backward", (
            "conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)",
            "conv_output_size(h, kh, sh, 0, dh), conv_output_size(w, kw, sw, 0, dw)")),
        "the weight's gradient: each group takes every G-th channel's windows, not a block": _wrong("ex_conv_backward", (
            "            taps = chunk.reshape(m, groups, cg, ho, wo, kh, kw)",
            "            taps = chunk.reshape(m, cg, groups, ho, wo, kh, kw).swapaxes(1, 2)")),
        "the input's gradient: every group uses the first group's filters": _wrong("ex_conv_backward", (
            "cols = np.matmul(filters.transpose(0, 2, 1), grads[part])",
            "cols = np.matmul(filters[:1].transpose(0, 2, 1), grads[part])")),
        "the weight's gradient of the last batch of images only (= where += belongs)": _wrong("ex_conv_backward", (
            "gw += np.matmul(", "gw[...] = np.matmul(")),
        "the bias's gradient is the mean, not the sum": _wrong("ex_conv_backward", (
            "g.sum(axis=(0, 2, 3))", "g.mean(axis=(0, 2, 3))")),
        "output_mask ignored: the bias's gradient always computed": _wrong("ex_conv_backward", (
            "    if output_mask[2]:\n", "    if True:\n")),
        "fold's window count not checked against the columns": _wrong("ex_conv_backward", (
            "    if ho * wo != length or ho <= 0 or wo <= 0:\n", "    if ho <= 0 or wo <= 0:\n")),
    },
    "ex_pool": {
        "ties resolved to the last maximum, not the first": {
            "code": _wrong("ex_pool", ("best = flat.argmax(axis=-1)",
                                       "best = flat.shape[-1] - 1 - flat[..., ::-1].argmax(axis=-1)")),
            "shows": "tied maxima"},
        "the padding is zeros, not -inf (a zero beats every negative pixel)": _wrong("ex_pool", (
            'pad(x, (pw, pw, ph, ph), float("-inf"))', "pad(x, (pw, pw, ph, ph))")),
        "the indices count in the padded image": _wrong("ex_pool", (
            "p * dh - ph", "p * dh"), ("q * dw - pw", "q * dw")),
        "the indices ignore the dilation": _wrong("ex_pool", ("p * dh - ph", "p - ph"), ("q * dw - pw", "q - pw")),
        "the backward writes instead of adding (overlapping windows that chose one pixel)": _wrong("ex_pool", (
            """    sums = np.bincount(flat, weights=g.ravel(), minlength=n * c * h * w)  # adds where windows chose one pixel
""", """    sums = np.zeros(n * c * h * w)
    sums[flat] = g.ravel()
""")),
        "avg_pool2d divides by the real pixels even with count_include_pad=True": _wrong("ex_pool", (
            "            if not count_include_pad:\n", "            if True:\n")),
        "avg_pool2d ignores count_include_pad=False": _wrong("ex_pool", (
            "            if not count_include_pad:\n", "            if False:\n")),
        "avg_pool2d's stride defaults to 1, not to the kernel size": _wrong("ex_pool", (
            "kernel, steps, pads, _ = pool_arguments(t, kernel_size, stride, padding, 1, ceil_mode)",
            "kernel, steps, pads, _ = pool_arguments(t, kernel_size, 1 if stride is None else stride, padding, 1, "
            "ceil_mode)")),
        "ceil_mode ignored: the count always rounds down": _wrong("ex_pool", (
            "(stride - 1 if ceil_mode else 0)", "0")),
        "ceil_mode keeps a last window that starts in the right padding": {
            "code": _wrong("ex_pool", ("    if ceil_mode and (count - 1) * stride >= size + padding:\n", "    if False:\n")),
            "shows": "right padding"},
        "ceil_mode's start rule against the whole padded size": _wrong("ex_pool", (
            ">= size + padding:", ">= size + 2 * padding:")),
        "max_pool2d's ceil_mode overhang padded with zeros, not -inf": _wrong("ex_pool", (
            'padded = pad(padded, (0, right, 0, below), float("-inf"))', "padded = pad(padded, (0, right, 0, below))")),
        "avg_pool2d counts the ceil_mode overhang in its divisor": _wrong("ex_pool", (
            "ends = np.minimum(starts + k, size + p)", "ends = starts + k")),
    },
    "ex_device": {
        **_ignoring_max_blocks("ex_device", "windows", "n * c * ho * wo", "the matrix"),
        "the taps' index without the dilation (the taps side by side)": _wrong("ex_device", (
            "long long h = i * strideH - pH + p * dH, w = j * strideW - pW + q * dW;",
            "long long h = i * strideH - pH + p, w = j * strideW - pW + q;")),
        "no bounds check for the padding (the padding read from outside the image)": _wrong("ex_device", (
            "column[(p * kW + q) * L] = (h >= 0 && h < H && w >= 0 && w < W) ? image[h * sH + w * sW] : T(0);",
            "column[(p * kW + q) * L] = image[h * sH + w * sW];")),
        "the bounds check only at the far edges (a negative row or column read before the image)": _wrong("ex_device", (
            "(h >= 0 && h < H && w >= 0 && w < W)", "(h < H && w < W)")),
        "no grid-stride loop: one window per thread, the windows past the grid never copied": {
            "code": _wrong("ex_device", (
                """    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < windows;
         index += (long long)blockDim.x * gridDim.x) {""",
                """    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index < windows) {""")),
            "shows": "grid-stride"},
        "x read as contiguous (its offsets from the shape, not from its strides)": _wrong("ex_device", (
            "const T* image = x + n * sN + c * sC;", "const T* image = x + (n * C + c) * H * W;"),
            ("image[h * sH + w * sW]", "image[h * W + w]")),
        "the padding not subtracted: the windows start at i * stride of the padded image, read unpadded": _wrong(
            "ex_device", ("long long h = i * strideH - pH + p * dH, w = j * strideW - pW + q * dW;",
                          "long long h = i * strideH + p * dH, w = j * strideW + q * dW;")),
        "the rows ordered (kH, kW, C) instead of (C, kH, kW)": _wrong("ex_device", (
            "T* column = cols + (n * C + c) * kH * kW * L + i * Wout + j;", "T* column = cols + (n * kH * kW * C + c) * L + i * Wout + j;"),
            ("column[(p * kW + q) * L]", "column[(p * kW + q) * C * L]")),
        "the launch counts the windows without the padding": _wrong("ex_device", (
            "ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)",
            "ho, wo = conv_output_size(h, kh, sh, 0, dh), conv_output_size(w, kw, sw, 0, dw)")),
        "the launch passes the stride as (width, height)": _wrong("ex_device", ("ph, pw, sh, sw, ho, wo)", "ph, pw, sw, sh, ho, wo)")),
        "an empty batch still launched (launch_1d's None unpacked)": _wrong("ex_device", (
            "    if geometry is not None:\n", "    if True:\n")),
    },
    "ex_col2im": {
        **_ignoring_max_blocks("ex_col2im", "pixels", "n * c * h * w", "the image"),
        "col2im overwrites instead of adding: overlapping windows keep only the last tap's share": {
            "code": _wrong("ex_col2im", ("                sum += column[", "                sum = column[")),
            "shows": "overlapping"},
        "the window's origin with the padding on the wrong side (h - pH: the windows start below the image)": _wrong(
            "ex_col2im", ("long long top = h + pH - p * dH;", "long long top = h - pH - p * dH;"),
            ("long long left = w + pW - q * dW;", "long long left = w - pW - q * dW;")),
        "the dilation ignored (the taps side by side)": _wrong("ex_col2im", (
            "long long top = h + pH - p * dH;", "long long top = h + pH - p;"),
            ("long long left = w + pW - q * dW;", "long long left = w + pW - q;")),
        "no check that the stride divides the offset: a row between two windows' starts read as a window": _wrong(
            "ex_col2im", ("top < 0 || top % strideH != 0 ||", "top < 0 ||"), ("left < 0 || left % strideW != 0 ||", "left < 0 ||")),
        "no check against H_out: a window past the last one read (the next tap's entries)": _wrong("ex_col2im", (
            " || top / strideH >= Hout)", ")"), (" || left / strideW >= Wout)", ")")),
        "a pixel no window covers left unwritten": {
            "code": _wrong("ex_col2im", ("        image[index] = sum;", "        if (sum != T(0))\n            image[index] = sum;")),
            "shows": "never written"},
        "no grid-stride loop: one pixel per thread, the pixels past the grid never written": {
            "code": _wrong("ex_col2im", (
                """    for (long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x; index < pixels;
         index += (long long)blockDim.x * gridDim.x) {""",
                """    long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (index < pixels) {""")),
            "shows": "grid-stride"},
        "the launch counts the windows without the padding": _wrong("ex_col2im", (
            "ho, wo = conv_output_size(h, kh, sh, ph, dh), conv_output_size(w, kw, sw, pw, dw)",
            "ho, wo = conv_output_size(h, kh, sh, 0, dh), conv_output_size(w, kw, sw, 0, dw)")),
        "an empty image still launched (launch_1d's None unpacked)": _wrong("ex_col2im", (
            "    if geometry is not None:\n", "    if True:\n")),
    },
    "ex_layers": {
        "the bias initialised with fan_in = in_channels (the kernel's size left out)": _wrong("ex_layers", (
            "fan_in = self.weight.shape[1] * self.kernel_size[0] * self.kernel_size[1]", "fan_in = self.weight.shape[1]")),
        "the weight's second dim is in_channels, whatever the groups": _wrong("ex_layers", (
            "empty(out_channels, in_channels // groups, *self.kernel_size", "empty(out_channels, in_channels, *self.kernel_size")),
        "the weight drawn with Linear's default a=0 instead of a=√5": _wrong("ex_layers", (
            "kaiming_uniform_(self.weight, a=math.sqrt(5))", "kaiming_uniform_(self.weight)")),
        "repr always shows the padding": _wrong("ex_layers", ("        if self.padding != (0, 0):\n", "        if True:\n")),
        "MaxPool2d's stride defaults to 1": _wrong("ex_layers", (
            "self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size\n        self.padding, self.dilation",
            "self.kernel_size, self.stride = kernel_size, stride if stride is not None else 1\n        self.padding, self.dilation")),
        "AvgPool2d drops count_include_pad": _wrong("ex_layers", (
            "avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)",
            "avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode)")),
        "MaxPool2d ignores ceil_mode": _wrong("ex_layers", (
            "self.dilation, self.ceil_mode,\n                          self.return_indices)", "self.dilation)")),
        "MaxPool2d's repr always says ceil_mode=False": _wrong("ex_layers", (
            "ceil_mode={self.ceil_mode}\")", "ceil_mode=False\")")),
        "AvgPool2d takes count_include_pad before ceil_mode (not torch's order)": _wrong("ex_layers", (
            "ceil_mode: bool = False, count_include_pad: bool = True):\n        super",
            "count_include_pad: bool = True, ceil_mode: bool = False):\n        super")),
        "no check that groups divide the channels": _wrong("ex_layers", (
            "        if in_channels % groups or out_channels % groups:\n", "        if False:\n")),
    },
    "ex_adaptive": {
        "the windows' ends rounded down": _wrong("ex_adaptive", (
            "start, end = (i * size) // out, -(-((i + 1) * size) // out)", "start, end = (i * size) // out, ((i + 1) * size) // out")),
        "windows of a fixed size, size // out": _wrong("ex_adaptive", (
            "start, end = (i * size) // out, -(-((i + 1) * size) // out)",
            "start, end = i * max(size // out, 1), (i + 1) * max(size // out, 1)")),
        "None taken as 1 instead of the input's size": _wrong("ex_adaptive", (
            "out_h, out_w = h if size[0] is None else size[0], w if size[1] is None else size[1]",
            "out_h, out_w = size[0] or 1, size[1] or 1")),
        "the columns' windows from the height": _wrong("ex_adaptive", (
            "averaging_matrix(w, out_w, x.dtype.numpy)", "averaging_matrix(h, out_w, x.dtype.numpy)")),
        "no check of the output_size's length": _wrong("ex_adaptive", ("    if len(size) != 2:\n", "    if False:\n")),
        "an empty image accepted": _wrong("ex_adaptive", ("    if 0 in x.shape[x.dim() - 3:]:\n", "    if False:\n")),
        "the repr shows an int as a pair": _wrong("ex_adaptive", (
            'return f"output_size={self.output_size}"', 'return f"output_size={pair(self.output_size, \'output_size\')}"')),
    },
    "ex_batch_norm": {
        "the backward forgets the mean of the gradient (the mean's dependence on x)": _wrong("ex_batch_norm", (
            "g = g - (sum_g / n).reshape(shape) - x_hat", "g = g - x_hat")),
        "the backward forgets the x̂ term (the variance's dependence on x)": _wrong("ex_batch_norm", (
            "g = g - (sum_g / n).reshape(shape) - x_hat * (sum_g_x_hat / n).reshape(shape)",
            "g = g - (sum_g / n).reshape(shape)")),
        "eval's backward differentiates the statistics too, as training's": _wrong("ex_batch_norm", (
            "        if training:  # the statistics move with x", "        if True:  # the statistics move with x")),
        "training's backward takes the statistics as constants, as eval's": _wrong("ex_batch_norm", (
            "        if training:  # the statistics move with x", "        if False:  # the statistics move with x")),
        "the running variance averages the biased variance": _wrong("ex_batch_norm", (
            "running += momentum * var * (n / (n - 1))", "running += momentum * var")),
        "the batch normalised by its unbiased variance": _wrong("ex_batch_norm", (
            "var = (centered * centered).mean(axis=axes)", "var = (centered * centered).sum(axis=axes) / (n - 1)")),
        "the running mean replaced by the batch's, not averaged": _wrong("ex_batch_norm", (
            "            running *= 1 - momentum\n            running += momentum * mean\n",
            "            running[...] = mean\n")),
        "eps added after the square root": _wrong("ex_batch_norm", (
            "invstd = 1 / np.sqrt(var + eps)", "invstd = 1 / (np.sqrt(var) + eps)")),
        "the weight's gradient is the bias's (x̂ left out)": _wrong("ex_batch_norm", (
            "from_numpy(sum_g_x_hat.astype(a.dtype, copy=False)) if output_mask[1]",
            "from_numpy(sum_g.astype(a.dtype, copy=False)) if output_mask[1]")),
        "the input's gradient without the weight": _wrong("ex_batch_norm", (
            "scale = invstd.numpy() if weight is None else invstd.numpy() * weight.numpy()", "scale = invstd.numpy()")),
        "eval normalises with the batch's statistics (and updates the running ones)": _wrong("ex_batch_norm", (
            "    if training:\n        n = a.size", "    if True:\n        n = a.size")),
        "output_mask ignored: every gradient computed": _wrong("ex_batch_norm", (
            " if output_mask[1] else None", ""), (" if output_mask[2] else None", "")),
        "the bias dropped when there is no weight (weight and bias taken to come together)": _wrong("ex_batch_norm", (
            "shift = -mean * scale if bias is None else", "shift = -mean * scale if bias is None or weight is None else")),
        "the statistics returned in float64 for a float32 x (and the input's gradient too)": _wrong("ex_batch_norm", (
            "    return tuple(from_numpy(v.astype(a.dtype, copy=False)) for v in (y, mean, invstd))",
            "    return from_numpy(y.astype(a.dtype)), from_numpy(mean.astype(np.float64)), "
            "from_numpy(invstd.astype(np.float64))"), (
            "grad_input = from_numpy((g * scale.reshape(shape)).astype(a.dtype, copy=False))",
            "grad_input = from_numpy((g * scale.reshape(shape)).astype(np.float64))")),
    },
    "ex_batchnorm2d": {
        "BatchNorm2d accepts BatchNorm1d's 3-D input": _wrong("ex_batchnorm2d", (
            "        if x.dim() != 4:\n", "        if x.dim() == 3:\n            return super().forward(x)\n        if x.dim() != 4:\n")),
        "momentum=None taken as 0.1 (no cumulative average)": _wrong("ex_batchnorm2d", (
            "factor = 0.0 if self.momentum is None else self.momentum", "factor = 0.1 if self.momentum is None else self.momentum"), (
            "            if self.momentum is None:  # a cumulative average\n"
            "                factor = 1.0 / float(self.num_batches_tracked.item())\n", "")),
        "num_batches_tracked never counted": _wrong("ex_batchnorm2d", (
            "                self.num_batches_tracked.add_(1)\n", "                pass\n")),
        "batches counted in eval mode too": _wrong("ex_batchnorm2d", (
            "if self.training and self.track_running_stats:", "if self.track_running_stats:")),
        "the cumulative average counts one batch too many": _wrong("ex_batchnorm2d", (
            "1.0 / float(self.num_batches_tracked.item())", "1.0 / (float(self.num_batches_tracked.item()) + 1)")),
        "eval mode normalises with the batch's statistics": _wrong("ex_batchnorm2d", (
            "batch_statistics = self.training or self.running_mean is None", "batch_statistics = True")),
        "the running statistics never reach batch_norm in training (never updated)": _wrong("ex_batchnorm2d", (
            "tracked = not self.training or self.track_running_stats", "tracked = not self.training")),
        "the running statistics updated in training even when the module no longer tracks them": _wrong(
            "ex_batchnorm2d", ("tracked = not self.training or self.track_running_stats", "tracked = True")),
        "a batch of the wrong number of dims counted before it is refused": _wrong("ex_batchnorm2d", (
            _BN2D_CHECK + "        factor", "        factor"), (
            "        batch_statistics = self.training", _BN2D_CHECK + "        batch_statistics = self.training")),
        "a batch counted only once it is normalised (a refused one is not counted, as torch's is)": _wrong(
            "ex_batchnorm2d", (_BN2D_COUNT, """            if self.momentum is None:  # a cumulative average
                factor = 1.0 / (float(self.num_batches_tracked.item()) + 1)
"""), (_BN2D_CALL, """        y = batch_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                       self.weight, self.bias, batch_statistics, factor, self.eps)
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
        return y""")),
        "the cumulative average's factor computed in eval too (1 / 0 before any training step)": _wrong(
            "ex_batchnorm2d", ("            if self.momentum is None:  # a cumulative average\n"
                               "                factor = 1.0 / float(self.num_batches_tracked.item())\n", ""), (
            "        batch_statistics = self.training", "        if self.momentum is None:\n"
            "            factor = 1.0 / float(self.num_batches_tracked.item())\n        batch_statistics = self.training")),
    },
}

package cuda

// hostCAPISource ends model.cpp: it closes the runtime's anonymous
// namespace and defines the extern "C" functions model.h declares.
const hostCAPISource = `}  // namespace

extern "C" {

size_t lum_tensor_count(void) { return kNumTensors; }

const lum_tensor_info* lum_tensor(size_t i) { return i < kNumTensors ? &kTensors[i] : nullptr; }

int lum_create(lum_model** out, char* err, size_t errlen) { return lum_create_on(out, 0, err, errlen); }

int lum_create_on(lum_model** out, int device, char* err, size_t errlen) {
    if (out == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_create: out is NULL");
    }
    *out = nullptr;
    if (kPTXBytes == 0) {
        return fail(err, errlen, LUM_ERR_NO_KERNELS,
                    "the model was compiled without NVRTC: no kernels embedded (compile %s where libnvrtc is installed)", kModelName);
    }
    lum_model* m = static_cast<lum_model*>(calloc(1, sizeof(lum_model)));
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "lum_create: out of host memory");
    }
    int rc = create(m, device, err, errlen);
    if (rc != LUM_OK) {
        lum_destroy(m);
        return rc;
    }
    *out = m;
    return LUM_OK;
}

int lum_load_weights(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    int rc = transfer(m, "lum_load_weights", kWeight, name, data, nullptr, bytes, err, errlen);
    if (rc == LUM_OK) {
        m->prepared = false;
    }
    return rc;
}

int lum_prepare(lum_model* m, char* err, size_t errlen) {
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_prepare: the model is NULL");
    }
    for (int i = 0; i < kNumBuffers; i++) {
        if (kBuffers[i].kind == kWeight && !m->ready[i]) {
            return fail(err, errlen, LUM_ERR_ORDER, "lum_prepare: weight %s was not loaded (lum_load_weights)", kBuffers[i].name);
        }
    }
    Current current(m->d, m->ctx);
    int rc = uploadConstants(m, "lum_prepare", err, errlen);
    if (rc != LUM_OK) {
        return rc;
    }
    for (int i = 0; i < kNumPrep; i++) {
        rc = launch(m, i, "lum_prepare", err, errlen);
        if (rc != LUM_OK) {
            return rc;
        }
    }
    CUresult r = m->d.cuCtxSynchronize();
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuCtxSynchronize (lum_prepare)");
    }
    m->prepared = true;
    return LUM_OK;
}

int lum_load_prepared(lum_model* m, const char* path, char* err, size_t errlen) {
    if (m == nullptr || path == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_load_prepared: a NULL model or path");
    }
    return loadPrepared(m, path, err, errlen);
}

int lum_set_input(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    if (name != nullptr && data != nullptr) {
        // A runtime extent outside its range would have kernels write
        // outside their buffers (a KV cache row past the cache).
        int i = find(kInput, name);
        for (int s = 0; i >= 0 && s < kNumSymbols; s++) {
            if (kSymbols[s].buffer != i || bytes != kBuffers[i].bytes) {
                continue;
            }
            long long v = 0;
            if (bytes == 4) {
                int32_t x;
                memcpy(&x, data, 4);
                v = x;
            } else if (bytes == 8) {
                int64_t x;
                memcpy(&x, data, 8);
                v = x;
            }
            if (v < kSymbols[s].lo || v > kSymbols[s].hi) {
                return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_set_input: %s=%lld is outside the range the model was compiled for, %lld..%lld",
                            name, v, kSymbols[s].lo, kSymbols[s].hi);
            }
        }
    }
    int rc = transfer(m, "lum_set_input", kInput, name, data, nullptr, bytes, err, errlen);
    if (rc == LUM_OK && bytes > 0) {
        // Paged attention's metadata, and a serving step's, are checked by
        // lum_run, on a copy.
        int i = find(kInput, name);
        if (i >= 0 && (pagedBuffer(i) || stepBuffer(i))) {
            if (m->shadow[i] == nullptr) {
                m->shadow[i] = static_cast<unsigned char*>(malloc(bytes));
                if (m->shadow[i] == nullptr) {
                    m->ready[i] = 0;
                    return fail(err, errlen, LUM_ERR_MEMORY, "lum_set_input: out of host memory for a copy of %s", name);
                }
            }
            memcpy(m->shadow[i], data, bytes);
        }
    }
    return rc;
}

int lum_run(lum_model* m, char* err, size_t errlen) {
    if (m == nullptr) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_run: the model is NULL");
    }
    if (!m->prepared) {
        return fail(err, errlen, LUM_ERR_ORDER,
                    "lum_run: the model is not prepared (lum_prepare after loading every weight, or lum_load_prepared)");
    }
    for (int i = 0; i < kNumBuffers; i++) {
        if (kBuffers[i].kind == kInput && !m->ready[i]) {
            return fail(err, errlen, LUM_ERR_ORDER, "lum_run: input %s was not set (lum_set_input)", kBuffers[i].name);
        }
    }
    if (kStep.present) {
        int rc = checkStep(m, err, errlen);
        if (rc != LUM_OK) {
            return rc;  // before any launch: no cache slot changed
        }
        m->seqs = stepAt(m, kSeqs, 0);
        m->tokens = stepAt(m, kStarts, m->seqs);
    }
    for (int p = 0; p < kNumPaged; p++) {
        // Before any launch: a block past the pool would be read.
        int rc = checkPaged(m, kPaged[p], err, errlen);
        if (rc != LUM_OK) {
            return rc;
        }
    }
    Current current(m->d, m->ctx);
    for (int i = kNumPrep; i < kNumLaunches; i++) {
        int rc = launch(m, i, "lum_run", err, errlen);
        if (rc != LUM_OK) {
            return rc;
        }
    }
    CUresult r = m->d.cuCtxSynchronize();
    if (r != 0) {
        return cudaFail(m->d, r, err, errlen, "cuCtxSynchronize (lum_run)");
    }
    return LUM_OK;
}

int lum_get_output(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen) {
    if (data == nullptr && bytes > 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_get_output: data is NULL");
    }
    return transfer(m, "lum_get_output", kOutput, name, nullptr, data, bytes, err, errlen);
}

int lum_get_state(lum_model* m, const char* name, void* data, size_t bytes, char* err, size_t errlen) {
    if (data == nullptr && bytes > 0) {
        return fail(err, errlen, LUM_ERR_ARGUMENT, "lum_get_state: data is NULL");
    }
    return transfer(m, "lum_get_state", kState, name, nullptr, data, bytes, err, errlen);
}

int lum_set_state(lum_model* m, const char* name, const void* data, size_t bytes, char* err, size_t errlen) {
    return transfer(m, "lum_set_state", kState, name, data, nullptr, bytes, err, errlen);
}

const char* lum_module_image(const lum_model* m) { return m != nullptr && m->image != nullptr ? m->image : ""; }

void lum_destroy(lum_model* m) {
    if (m == nullptr) {
        return;
    }
    if (m->ctx != nullptr) {
        Current current(m->d, m->ctx);
        for (int i = 0; i < kNumBuffers; i++) {
            if (m->own[i] != 0) {
                m->d.cuMemFree(m->own[i]);
            }
        }
        if (m->arena != 0) {
            m->d.cuMemFree(m->arena);
        }
        if (m->module != nullptr) {
            m->d.cuModuleUnload(m->module);
        }
    }
    if (m->retained) {
        m->d.cuDevicePrimaryCtxRelease(m->device);
    }
    if (m->d.lib != nullptr) {
        dlclose(m->d.lib);
    }
    for (int i = 0; i < kNumBuffers; i++) {
        free(m->shadow[i]);
    }
    free(m);
}

}  // extern "C"
`

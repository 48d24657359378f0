package cuda

// hostPreparedSource is the second half of lum_load_prepared: the file a
// call holds (PreparedFile), and loadPrepared, which checks the header's
// tensors against kStored and the program's digest and copies their data
// to the device through a staging buffer.
const hostPreparedSource = `// PreparedFile is what one lum_load_prepared call holds; the destructor
// releases it on every path.
struct PreparedFile {
    int fd = -1;
    char* header = nullptr;
    unsigned char* staging = nullptr;
    unsigned long long* begin = nullptr;  // each kStored tensor's data_offsets, once seen
    unsigned long long* end = nullptr;
    bool* seen = nullptr;
    int* order = nullptr;                 // kStored by begin
    PreparedFile() = default;
    PreparedFile(const PreparedFile&) = delete;
    PreparedFile& operator=(const PreparedFile&) = delete;
    ~PreparedFile() {
        if (fd >= 0) {
            close(fd);
        }
        free(header);
        free(staging);
        free(begin);
        free(end);
        free(seen);
        free(order);
    }
};

// readAt reads n bytes at offset off; on failure it returns the reason.
const char* readAt(int fd, void* out, size_t n, unsigned long long off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, static_cast<char*>(out) + got, n - got, static_cast<off_t>(off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return strerror(errno);
        }
        if (r == 0) {
            return "the file ended early (did it change while it was read?)";
        }
        got += static_cast<size_t>(r);
    }
    return nullptr;
}

int loadPrepared(lum_model* m, const char* path, char* err, size_t errlen) {
    const char* caller = "lum_load_prepared";
    PreparedFile f;
    f.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, strerror(errno));
    }
    struct stat st;
    if (fstat(f.fd, &st) != 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: not a regular file", caller, path);
    }
    unsigned long long size = static_cast<unsigned long long>(st.st_size);
    if (size < 8) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %llu bytes, too short for a safetensors file's 8-byte header length",
                    caller, path, size);
    }
    unsigned char prefix[8];
    if (const char* why = readAt(f.fd, prefix, 8, 0)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, why);
    }
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--) {
        n = n << 8 | prefix[i];
    }
    if (n > kMaxHeaderBytes) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a header of %llu bytes, more than the %llu a safetensors file may have",
                    caller, path, n, kMaxHeaderBytes);
    }
    if (n > size - 8) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a header of %llu bytes in a file of %llu (is it truncated?)", caller, path,
                    n, size);
    }
    unsigned long long dataBytes = size - 8 - n;
    f.header = static_cast<char*>(malloc(n + 1));
    f.begin = static_cast<unsigned long long*>(calloc(kNumStored + 1, sizeof *f.begin));
    f.end = static_cast<unsigned long long*>(calloc(kNumStored + 1, sizeof *f.end));
    f.seen = static_cast<bool*>(calloc(kNumStored + 1, sizeof *f.seen));
    f.order = static_cast<int*>(calloc(kNumStored + 1, sizeof *f.order));
    if (f.header == nullptr || f.begin == nullptr || f.end == nullptr || f.seen == nullptr || f.order == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "%s: %s: out of host memory for a %llu-byte header", caller, path, n);
    }
    if (const char* why = readAt(f.fd, f.header, n, 8)) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %s", caller, path, why);
    }
    f.header[n] = '\0';

    // The header: every tensor is one of kStored, of its dtype and shape,
    // its bytes inside the data.
    Cursor c{f.header, f.header, f.header + n, nullptr};
    const char* digest = nullptr;
    bool metadata = false;
    const char* tensor = nullptr;  // the entry being read, for messages
    bool more = false;
    bool ok = objectStart(c, &more);
    while (ok && more) {
        char* key;
        tensor = nullptr;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key")) {
            ok = false;
            break;
        }
        if (strcmp(key, "__metadata__") == 0) {
            if (metadata) {
                ok = c.stop("two __metadata__ objects");
                break;
            }
            metadata = true;
            if (!jsonMetadata(c, &digest)) {
                ok = false;
                break;
            }
            ok = objectNext(c, &more);
            continue;
        }
        tensor = key;
        int s = 0;
        while (s < kNumStored && strcmp(kBuffers[kStored[s].buffer].name, key) != 0) {
            s++;
        }
        if (s == kNumStored) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" is not a weight or prepared weight that %s's run reads",
                        caller, path, key, kModelName);
        }
        const StoredDesc& want = kStored[s];
        int b = want.buffer;
        if (f.seen[s]) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" appears twice", caller, path, key);
        }
        Entry e;
        memset(&e, 0, sizeof e);
        if (!jsonEntry(c, &e)) {
            ok = false;
            break;
        }
        const char* fields[3] = {"dtype", "shape", "data_offsets"};
        for (int i = 0; i < 3; i++) {
            if (!e.has[i]) {
                return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" has no %s", caller, path, key, fields[i]);
            }
        }
        if (strcmp(e.dtype, want.dtype) != 0) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": dtype %s does not fit the model's %s (%s)", caller, path,
                        key, e.dtype, describe(b), want.dtype);
        }
        bool same = e.rank == want.rank;
        for (int i = 0; same && i < e.rank; i++) {
            same = e.shape[i] == static_cast<unsigned long long>(want.shape[i]);
        }
        if (!same) {
            char text[256];
            shapeText(text, sizeof text, e.shape, e.rank);
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": shape %s does not fit the model's %s", caller, path, key,
                        text, describe(b));
        }
        if (e.noffsets != 2) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets has %d numbers, not 2", caller, path, key,
                        e.noffsets);
        }
        unsigned long long lo = e.offsets[0], hi = e.offsets[1];
        if (lo > hi) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] out of order", caller, path, key,
                        lo, hi);
        }
        if (hi > dataBytes) {
            return fail(err, errlen, LUM_ERR_FILE,
                        "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] lie beyond the %llu bytes of data (is the file truncated?)", caller,
                        path, key, lo, hi, dataBytes);
        }
        if (hi - lo != kBuffers[b].bytes) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but the model's %s takes %llu",
                        caller, path, key, lo, hi, hi - lo, describe(b), kBuffers[b].bytes);
        }
        f.seen[s] = true;
        f.begin[s] = lo;
        f.end[s] = hi;
        ok = objectNext(c, &more);
    }
    if (ok) {
        tensor = nullptr;
        space(c);
        if (c.p != c.end) {
            ok = c.stop("bytes after the JSON object");
        }
    }
    if (!ok) {
        long long at = static_cast<long long>(c.p - c.start) + 8;
        if (tensor != nullptr) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": a malformed header at byte %lld: %s", caller, path, tensor,
                        at, c.why != nullptr ? c.why : "invalid JSON");
        }
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: a malformed header at byte %lld: %s", caller, path, at,
                    c.why != nullptr ? c.why : "invalid JSON");
    }
    if (digest == nullptr) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: no %s in the metadata: not prepared weights that lumsearch compile wrote for %s",
                    caller, path, kDigestKey, kModelName);
    }
    if (strcmp(digest, kProgramDigest) != 0) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: prepared for another program (%s %.80s, this model's %s): compile the model again or use lum_load_weights and lum_prepare",
                    caller, path, kDigestKey, digest, kProgramDigest);
    }
    for (int s = 0; s < kNumStored; s++) {
        if (!f.seen[s]) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\" is missing (the model's %s)", caller, path,
                        kBuffers[kStored[s].buffer].name, describe(kStored[s].buffer));
        }
    }
    // The tensors lie one after another from the start of the data to its
    // end, as the format requires: no overlap, no gap.
    for (int s = 0; s < kNumStored; s++) {
        int j = s;
        for (; j > 0; j--) {
            int o = f.order[j - 1];
            if (f.begin[o] < f.begin[s] || (f.begin[o] == f.begin[s] && f.end[o] <= f.end[s])) {
                break;
            }
            f.order[j] = o;
        }
        f.order[j] = s;
    }
    unsigned long long at = 0;
    for (int k = 0; k < kNumStored; k++) {
        int s = f.order[k];
        if (f.begin[s] != at) {
            return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": data_offsets [%llu, %llu] %s the tensor before it, which ends at %llu",
                        caller, path, kBuffers[kStored[s].buffer].name, f.begin[s], f.end[s], f.begin[s] < at ? "overlap" : "leave a gap after",
                        at);
        }
        at = f.end[s];
    }
    if (at != dataBytes) {
        return fail(err, errlen, LUM_ERR_FILE, "%s: %s: %llu bytes after the last tensor", caller, path, dataBytes - at);
    }

    // The upload. From here on a failure leaves the model unprepared.
    unsigned long long largest = 1;
    for (int s = 0; s < kNumStored; s++) {
        largest = kBuffers[kStored[s].buffer].bytes > largest ? kBuffers[kStored[s].buffer].bytes : largest;
    }
    size_t chunk = largest < kStagingBytes ? static_cast<size_t>(largest) : kStagingBytes;
    f.staging = static_cast<unsigned char*>(malloc(chunk));
    if (f.staging == nullptr) {
        return fail(err, errlen, LUM_ERR_MEMORY, "%s: out of host memory", caller);
    }
    m->prepared = false;
    Current current(m->d, m->ctx);
    int rc = uploadConstants(m, caller, err, errlen);
    if (rc != LUM_OK) {
        return rc;
    }
    for (int k = 0; k < kNumStored; k++) {
        int s = f.order[k];
        int b = kStored[s].buffer;
        bool boolean = strcmp(kStored[s].dtype, "BOOL") == 0;
        unsigned long long done = 0, total = kBuffers[b].bytes;
        while (done < total) {
            size_t step = total - done < chunk ? static_cast<size_t>(total - done) : chunk;
            if (const char* why = readAt(f.fd, f.staging, step, 8 + n + f.begin[s] + done)) {
                return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": %s", caller, path, kBuffers[b].name, why);
            }
            for (size_t i = 0; boolean && i < step; i++) {
                if (f.staging[i] > 1) {
                    return fail(err, errlen, LUM_ERR_FILE, "%s: %s: tensor \"%s\": BOOL element %llu is %d, not 0 or 1", caller, path,
                                kBuffers[b].name, done + i, f.staging[i]);
                }
            }
            CUresult r = m->d.cuMemcpyHtoD(m->ptr[b] + done, f.staging, step);
            if (r != 0) {
                return cudaFail(m->d, r, err, errlen, "cuMemcpyHtoD %s (%s)", describe(b), caller);
            }
            done += step;
        }
        m->ready[b] = 1;
    }
    m->prepared = true;
    return LUM_OK;
}

`

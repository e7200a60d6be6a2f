import CVips
#if canImport(Glibc)
import Glibc
#endif

/// Makes thumbnails with libvips, in the thumbnail worker process (never in the daemon: a
/// decoder that crashes or runs away takes only the worker with it). The first page of an image
/// or PDF is shrunk once, with shrink-on-load where the format has it, to fit 1024×1024; the
/// smaller freedesktop sizes come from that; the attribute rendition is the largest PNG that
/// fits in 64 KiB, truecolour where it fits, else palette, smaller until it does.
public enum ThumbnailRenderer {
    /// Why a file has no thumbnail.
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// A set of renditions and the size of the largest.
    public struct Renditions: Sendable {
        public var width: Int
        public var height: Int
        public var pngs: [ThumbnailSize: [UInt8]]
    }

    /// Starts libvips in this process, once however many threads ask (starting it, and setting
    /// its cache and concurrency, while another thread renders crashed the tests' process).
    public static func start() -> Bool { started }

    private static let started: Bool = docfs_vips_start("docfs-thumbnail-worker", 1) == 0

    /// The renditions of the file at `path` (a document's content). A PDF, and a JPEG that
    /// decodes at a smaller scale for 512 pixels than for 1024, are done in steps when `early`
    /// is given, so the attribute rendition people wait for comes first: a decode that fits
    /// 512×512 (for a 4000×3000 photo 1/8 of its size, a quarter of the pixels of the 1/4 one,
    /// about half the time) makes it and the normal size, handed to `early` at once; then the
    /// large and x-large sizes; then a second decode makes the xx-large one, and the whole set
    /// is returned. Other images are decoded once, to fit 1024×1024.
    public static func render(path: String, early: ((Renditions) -> Void)? = nil) throws(Problem) -> Renditions {
        var start = [UInt8](repeating: 0, count: ImageSignature.length)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Problem("cannot open the content: \(String(cString: strerror(errno)))") }
        let n = start.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        close(fd)
        guard let signature = ImageSignature.of(Array(start[0..<max(n, 0)])) else { throw Problem("not an image or PDF") }
        guard let loader = docfs_vips_loader(path).map({ String(cString: $0) }), signature.loaders.contains(loader) else {
            throw Problem("libvips cannot read this \(signature.rawValue)")
        }
        var width: Int32 = 0, height: Int32 = 0, pages: Int32 = 0
        guard docfs_vips_header(path, &width, &height, &pages) == 0 else { throw Problem(lastError()) }
        guard Int(width) * Int(height) <= signature.pixelLimit else {
            throw Problem("\(width)×\(height) pixels: more than a thumbnail is made of")
        }
        let side = largestSide(width: Int(width), height: Int(height), signature: signature)
        let longest = Int(max(width, height))
        // Two decodes pay where the first costs much less: a PDF page drawn at a quarter of the
        // pixels, a JPEG decoded at a smaller scale.
        let vector = signature == .pdf
        if let early, vector || signature == .jpeg && jpegScale(longest: longest, fitting: ThumbnailSize.xLarge.pixels)
            >= 2 * jpegScale(longest: longest, fitting: ThumbnailSize.xxLarge.pixels) {
            let quickSide = largestSide(width: Int(width), height: Int(height), signature: signature, fitting: ThumbnailSize.xLarge.pixels)
            let quick = try decoded(path, side: quickSide, vector: vector)
            defer { docfs_vips_release(quick) }
            var renditions = try renditions(of: quick, sizes: [.normal])
            early(renditions)
            renditions.pngs.merge(try freedesktopSizes(of: quick, only: [.large, .xLarge])) { first, _ in first }
            let full = try decoded(path, side: side, vector: vector)
            defer { docfs_vips_release(full) }
            renditions.pngs.merge(try freedesktopSizes(of: full, only: [.xxLarge])) { _, bigger in bigger }
            renditions.width = Int(docfs_vips_width(full))
            renditions.height = Int(docfs_vips_height(full))
            return renditions
        }
        let image = try decoded(path, side: side, vector: vector)
        defer { docfs_vips_release(image) }
        return try renditions(of: image, sizes: ThumbnailSize.freedesktop)
    }

    /// The first page of the file at `path` decoded (once: the copy is in memory) to fit
    /// side×side, as 8-bit sRGB; the caller releases it.
    private static func decoded(_ path: String, side: Int, vector: Bool) throws(Problem) -> UnsafeMutablePointer<VipsImage> {
        guard let shrunk = docfs_vips_thumbnail_file(path, Int32(side), vector ? 1 : 0) else { throw Problem(lastError()) }
        defer { docfs_vips_release(shrunk) }
        guard let converted = docfs_vips_eight_bit(shrunk) else { throw Problem(lastError()) }
        defer { docfs_vips_release(converted) }
        guard let image = docfs_vips_in_memory(converted) else { throw Problem(lastError()) }
        return image
    }

    /// The attribute rendition and the freedesktop `sizes` (normal among them) of `image`. The
    /// normal size is made first: its bytes per pixel tell the attribute rendition's first try,
    /// made on a thread of its own (it is the one people wait for) beside the other sizes.
    private static func renditions(of image: UnsafeMutablePointer<VipsImage>, sizes: [ThumbnailSize]) throws(Problem) -> Renditions {
        var pngs = try freedesktopSizes(of: image, only: [.normal])
        let fitting = AttributeFitting(image: image, sample: pngs[.normal]!,
                                       samplePixels: pixels(fitting: ThumbnailSize.normal.pixels, image))
        let others = sizes.filter { $0 != .normal }
        let started = !others.isEmpty && fitting.start()
        let made = Result { () throws(Problem) in try freedesktopSizes(of: image, only: others) }
        pngs[.attribute] = try fitting.finish(started: started).get()
        pngs.merge(try made.get()) { first, _ in first }
        return Renditions(width: Int(docfs_vips_width(image)), height: Int(docfs_vips_height(image)), pngs: pngs)
    }

    /// The renditions of a thumbnail a user gives (`png`, the bytes of the file at `path`): it
    /// must be a PNG that decodes whole and fits 1024×1024. The attribute rendition is `png`
    /// itself, byte for byte.
    public static func renderUserImage(path: String, png: [UInt8]) throws(Problem) -> Renditions {
        guard let declared = PNGChunks.size(of: png) else { throw Problem("not a PNG (no PNG signature and header)") }
        let limit = ThumbnailSize.attribute.pixels
        guard declared.width <= limit, declared.height <= limit else {
            throw Problem("\(declared.width)×\(declared.height) pixels: a thumbnail fits \(limit)×\(limit)")
        }
        guard let loaded = docfs_vips_load_png_strictly(path) else { throw Problem("the PNG does not decode: \(lastError())") }
        defer { docfs_vips_release(loaded) }
        guard let converted = docfs_vips_eight_bit(loaded) else { throw Problem(lastError()) }
        defer { docfs_vips_release(converted) }
        guard let image = docfs_vips_in_memory(converted) else { throw Problem(lastError()) }
        defer { docfs_vips_release(image) }
        var pngs = try freedesktopSizes(of: image, only: ThumbnailSize.freedesktop.filter { $0 != .xxLarge })
        pngs[.xxLarge] = png
        pngs[.attribute] = png
        return Renditions(width: declared.width, height: declared.height, pngs: pngs)
    }

    /// The freedesktop sizes `sizes` of `image` (which fits 1024×1024). The big renditions
    /// favour speed (they are read rarely, and locally), the small ones size.
    private static func freedesktopSizes(of image: UnsafeMutablePointer<VipsImage>,
                                         only sizes: [ThumbnailSize]) throws(Problem) -> [ThumbnailSize: [UInt8]] {
        var pngs: [ThumbnailSize: [UInt8]] = [:]
        for size in sizes {
            let compression: Int32 = size.pixels >= 512 ? 1 : 6
            if size == .xxLarge {
                pngs[size] = try encode(image, compression: compression, palette: false)
                continue
            }
            guard let smaller = docfs_vips_thumbnail_image(image, Int32(size.pixels)) else { throw Problem(lastError()) }
            defer { docfs_vips_release(smaller) }
            pngs[size] = try encode(smaller, compression: compression, palette: false)
        }
        return pngs
    }

    /// The longest side a rendition fitting `most`×`most` is made from: `most`, or a little
    /// less where that lets a JPEG decode at a smaller scale (1/2, 1/4, 1/8 of its size: a
    /// 4000×3000 photo decodes at 1000×750, not 2000×1500, for 1024, about twice as fast).
    static func largestSide(width: Int, height: Int, signature: ImageSignature,
                            fitting most: Int = ThumbnailSize.xxLarge.pixels) -> Int {
        let longest = max(width, height)
        guard signature == .jpeg else { return most }
        let scale = jpegScale(longest: longest, fitting: most)
        return scale > 1 ? min(most, longest / scale) : most
    }

    /// The scale divisor a JPEG whose longest side is `longest` decodes at for a rendition
    /// fitting `most`×`most`: the largest of 8, 4 and 2 that leaves at least 90% of `most`, else 1.
    static func jpegScale(longest: Int, fitting most: Int) -> Int {
        guard longest > most else { return 1 }
        return [8, 4, 2].first { longest / $0 >= most * 9 / 10 } ?? 1
    }

    /// The largest PNG of `image` that fits in 64 KiB: truecolour where it fits, else palette.
    /// The first size tried is estimated from `sample` (a truecolour PNG of `samplePixels`
    /// pixels of the same image) and, where truecolour cannot fit, from a palette PNG of the
    /// normal size; each try that is too big sets the next from how much it overshot, so most
    /// images take one try.
    static func fitted(_ image: UnsafeMutablePointer<VipsImage>, sample: [UInt8], samplePixels: Int) throws(Problem) -> [UInt8] {
        let limit = Double(ThumbnailSize.attributeLimit)
        let longest = Int(max(docfs_vips_width(image), docfs_vips_height(image)))
        let pixels = Double(docfs_vips_width(image)) * Double(docfs_vips_height(image))
        let truecolourBytesPerPixel = Double(sample.count) / Double(max(samplePixels, 1))
        var side = longest
        if pixels * truecolourBytesPerPixel > limit * 0.9, let palette = try paletteSample(of: image) {
            // Palette PNGs of photographs hold fewer bytes per pixel as they grow: their size
            // grew as the side to the power 1.66 to 1.81 in photos measured here, so the
            // larger power errs on the small side.
            side = min(longest, Int(Double(palette.side) * pow(limit * 0.9 / Double(palette.bytes), 1 / 1.81)))
        }
        var best: (png: [UInt8], side: Int)?
        for _ in 0..<12 {
            side = max(side, 16)
            let png = try smallestPNG(of: image, side: side, truecolourBytesPerPixel: truecolourBytesPerPixel)
            let fits = png.count <= Int(limit)
            if fits && (best == nil || side > best!.side) { best = (png, side) }
            // Aim at 90% of the limit: shrink after a miss, grow after a fit with much room
            // (the estimate is rough), and keep the largest that fits.
            let next = Int(Double(side) * (limit * 0.9 / Double(png.count)).squareRoot())
            if fits {
                guard png.count < Int(limit * 0.7), side < longest, best!.side == side, next > side else { break }
                side = min(longest, next)
            } else {
                guard side > 16 else { break }
                if let best, next <= best.side { break }
                side = min(side - 1, next)
            }
        }
        if let best { return best.png }
        throw Problem("no rendition fits in \(Int(limit)) bytes")
    }

    /// The longest side and the bytes of a palette PNG of `image` shrunk to the normal size;
    /// nil when it is that small already.
    private static func paletteSample(of image: UnsafeMutablePointer<VipsImage>) throws(Problem) -> (side: Int, bytes: Int)? {
        let side = ThumbnailSize.normal.pixels
        guard Int(max(docfs_vips_width(image), docfs_vips_height(image))) > side,
              let scaled = docfs_vips_thumbnail_image(image, Int32(side)) else { return nil }
        defer { docfs_vips_release(scaled) }
        let png = try encode(scaled, compression: 6, palette: true)
        return (Int(max(docfs_vips_width(scaled), docfs_vips_height(scaled))), png.count)
    }

    /// `image` shrunk to fit side×side as the smaller of truecolour (tried only where it may
    /// fit) and palette PNGs.
    private static func smallestPNG(of image: UnsafeMutablePointer<VipsImage>, side: Int,
                                    truecolourBytesPerPixel: Double) throws(Problem) -> [UInt8] {
        guard let scaled = docfs_vips_thumbnail_image(image, Int32(side)) else { throw Problem(lastError()) }
        defer { docfs_vips_release(scaled) }
        let area = Double(docfs_vips_width(scaled)) * Double(docfs_vips_height(scaled))
        if area * truecolourBytesPerPixel <= Double(ThumbnailSize.attributeLimit) * 0.95 {
            let truecolour = try encode(scaled, compression: 9, palette: false)
            if truecolour.count <= ThumbnailSize.attributeLimit { return truecolour }
        }
        return try encode(scaled, compression: 6, palette: true)
    }

    private static func encode(_ image: UnsafeMutablePointer<VipsImage>, compression: Int32, palette: Bool) throws(Problem) -> [UInt8] {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard docfs_vips_png(image, compression, palette ? 1 : 0, 8, &buffer, &length) == 0, let buffer else {
            throw Problem(lastError())
        }
        defer { docfs_vips_free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// How many pixels `image` has once shrunk to fit side×side.
    private static func pixels(fitting side: Int, _ image: UnsafeMutablePointer<VipsImage>) -> Int {
        let width = Double(docfs_vips_width(image)), height = Double(docfs_vips_height(image))
        let scale = min(1, Double(side) / max(width, height))
        return Int((width * scale).rounded()) * Int((height * scale).rounded())
    }

    private static func lastError() -> String {
        let text = String(cString: docfs_vips_last_error())
        return text.isEmpty ? "libvips failed" : text
    }
}

/// The attribute rendition made on a thread of its own while the caller makes the others.
private final class AttributeFitting: @unchecked Sendable {
    // libvips images may be read from several threads at once; `result` is written by the
    // thread before it ends and read only after pthread_join.
    let image: UnsafeMutablePointer<VipsImage>
    let sample: [UInt8]
    let samplePixels: Int
    var result: Result<[UInt8], ThumbnailRenderer.Problem>?
    private var thread = pthread_t()

    init(image: UnsafeMutablePointer<VipsImage>, sample: [UInt8], samplePixels: Int) {
        self.image = image
        self.sample = sample
        self.samplePixels = samplePixels
    }

    func run() {
        result = Result { () throws(ThumbnailRenderer.Problem) in
            try ThumbnailRenderer.fitted(image, sample: sample, samplePixels: samplePixels)
        }
    }

    /// Starts the thread; false when none could be made (`finish` then does the work).
    func start() -> Bool {
        pthread_create(&thread, nil, { argument in
            let fitting = Unmanaged<AttributeFitting>.fromOpaque(argument!).takeUnretainedValue()
            fitting.run()
            docfs_vips_thread_done()
            return nil
        }, Unmanaged.passUnretained(self).toOpaque()) == 0
    }

    func finish(started: Bool) -> Result<[UInt8], ThumbnailRenderer.Problem> {
        if started { pthread_join(thread, nil) } else { run() }
        return result!
    }
}

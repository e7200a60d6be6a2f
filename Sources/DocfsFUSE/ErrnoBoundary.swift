import DocfsCore
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The one place a `DocfsError` becomes an errno for the kernel. System errors pass as they
/// are (logged when they carry a reason); the rest map to their nearest errno; anything unforeseen is logged and answers EIO.
enum ErrnoBoundary {
    static func errno(for error: any Error, operation: StaticString, logger: Logger) -> Int32 {
        guard let error = error as? DocfsError else {
            logger.error("\(operation): unexpected error \(error)")
            return EIO
        }
        if let value = error.systemErrno {
            if value == EIO {
                logger.error("\(operation): \(error)")
            } else if !error.message.isEmpty {
                // A refusal with a reason (a container's folder, the control area): the log
                // says why; plain errors of the hot path carry none and are not logged.
                logger.notice("\(operation): \(error)")
            }
            return value
        }
        switch error.code {
        case .invalidArgument:
            logger.notice("\(operation): \(error)")
            return EINVAL
        case .refused:
            logger.notice("\(operation): \(error)")
            return EPERM
        case .denied:
            logger.notice("\(operation): \(error)")
            return EACCES
        case .notFound:
            logger.notice("\(operation): \(error)")
            return ENOENT
        case .system:
            return EIO
        case .storeBusy, .storeUnavailable, .badMountPoint, .missingSystemSupport, .internalFailure:
            logger.error("\(operation): \(error)")
            return EIO
        }
    }
}
